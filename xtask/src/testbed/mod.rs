//! The VM testbed (see issue 3).
