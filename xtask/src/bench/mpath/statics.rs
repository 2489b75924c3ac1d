//! The static configurations `bench mpath` measures the daemon against.
/// The row of the map multipath-tools itself builds, unconfigured.
pub const MULTIPATH_TOOLS: &str = "multipath-tools default";

/// A static configuration of the knobs the kernel honours
/// (docs/architecture.md).
#[derive(Clone, Debug)]
pub struct Static {
    pub name: String,
    pub selector: &'static str,
    /// service-time relative_throughput per path, in path order.
    pub weights: Vec<u32>,
    /// Paths (indices) in the active group; the rest wait in a second one.
    pub active: Vec<usize>,
    pub max_sectors_kb: Option<u32>,
    pub nr_requests: Option<u32>,
    pub queue_depth: Option<u32>,
    pub repeat: Option<u32>,
    /// Measure this raw path instead of the map (single-path).
    pub raw: Option<usize>,
    /// Load the table multipath-tools built for the LUN, as it is.
    pub multipath_tools: bool,
}

impl Static {
    pub fn sel(name: &str, selector: &'static str) -> Static {
        Static {
            name: name.into(),
            selector,
            weights: vec![],
            active: vec![],
            max_sectors_kb: None,
            nr_requests: None,
            queue_depth: None,
            repeat: None,
            raw: None,
            multipath_tools: false,
        }
    }
    /// The five configurations every scenario compares.
    pub fn standard(single: usize) -> Vec<Static> {
        let mut raw = Static::sel("single-path", "service-time");
        raw.raw = Some(single);
        let mut mpd = Static::sel(MULTIPATH_TOOLS, "service-time");
        mpd.multipath_tools = true;
        vec![
            raw,
            Static::sel("round-robin", "round-robin"),
            Static::sel("queue-length", "queue-length"),
            Static::sel("service-time", "service-time"),
            mpd,
        ]
    }
    pub fn grid(name: &str) -> Static {
        Static::sel(name, "service-time")
    }
    pub fn msk(mut self, kb: u32) -> Static {
        self.max_sectors_kb = Some(kb);
        self
    }
    pub fn qd(mut self, qd: u32) -> Static {
        self.queue_depth = Some(qd);
        self
    }
    pub fn nr(mut self, nr: u32) -> Static {
        self.nr_requests = Some(nr);
        self
    }
    pub fn active(mut self, a: &[usize]) -> Static {
        self.active = a.to_vec();
        self
    }
    pub fn weights(mut self, w: &[u32]) -> Static {
        self.weights = w.to_vec();
        self
    }
    pub fn selector(mut self, s: &'static str) -> Static {
        self.selector = s;
        self
    }
    /// The knobs it sets, for the table.
    pub fn describe(&self) -> String {
        let mut v = vec![];
        if self.multipath_tools {
            v.push("multipath-tools' own map".to_string());
        } else if let Some(i) = self.raw {
            v.push(format!("raw path {i}"));
        } else {
            v.push(self.selector.to_string());
        }
        if !self.weights.is_empty() {
            v.push(format!(
                "w {}",
                self.weights
                    .iter()
                    .map(|w| w.to_string())
                    .collect::<Vec<_>>()
                    .join(":")
            ));
        }
        if !self.active.is_empty() {
            v.push(format!("{} active", self.active.len()));
        }
        if let Some(k) = self.max_sectors_kb {
            v.push(format!("max_sectors_kb {k}"));
        }
        if let Some(k) = self.nr_requests {
            v.push(format!("nr_requests {k}"));
        }
        if let Some(k) = self.queue_depth {
            v.push(format!("qd {k}"));
        }
        if let Some(k) = self.repeat {
            v.push(format!("rr_min_io_rq {k}"));
        }
        v.join(", ")
    }
}
