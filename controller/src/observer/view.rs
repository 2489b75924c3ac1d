//! An array map mapped into our memory: reading it costs no syscall. The
//! daemon's snapshot reads every watched device's shared state each
//! window; on many mostly idle paths, lookups would be the largest part of
//! an idle window, and the view lets it skip a device whose state has not
//! moved (see `Observer::snapshot`). Writable too, for the one field
//! userspace clears every interval (a device's in-flight peak).
use std::{
    marker::PhantomData,
    os::fd::{AsFd, AsRawFd},
};

use aya::maps::MapData;

pub struct ArrayView<T> {
    base: *const T,
    len: usize,
    bytes: usize,
    _t: PhantomData<T>,
}

// SAFETY: the mapping lives as long as the view; the kernel's programs
// write it concurrently, which every access allows for (volatile, whole
// values copied out, single aligned fields written).
unsafe impl<T: Send> Send for ArrayView<T> {}
unsafe impl<T: Sync> Sync for ArrayView<T> {}

impl<T: Copy> ArrayView<T> {
    /// Maps `len` entries of an array map created with BPF_F_MMAPABLE.
    /// The mapping holds the map alive by itself.
    pub fn map(data: &MapData, len: u32) -> std::io::Result<Self> {
        // The kernel lays entries out at their size rounded up to 8.
        assert!(
            std::mem::size_of::<T>().is_multiple_of(8),
            "an array view needs 8-byte entries"
        );
        let len = len as usize;
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let bytes = (len * std::mem::size_of::<T>()).div_ceil(page) * page;
        // SAFETY: a fresh shared mapping of the map's fd; the kernel
        // checks the size against the map.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                data.fd().as_fd().as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(ArrayView {
            base: p as *const T,
            len,
            bytes,
            _t: PhantomData,
        })
    }

    /// Entry `i` as of now (fields written concurrently may be torn
    /// between each other, never within one aligned 8-byte field).
    pub fn get(&self, i: u32) -> Option<T> {
        let i = i as usize;
        // SAFETY: in bounds of the mapping, aligned (page-aligned base,
        // 8-byte entries).
        (i < self.len).then(|| unsafe { std::ptr::read_volatile(self.base.add(i)) })
    }

    /// Stores `v` into the aligned 8-byte field at `offset` (from
    /// `offset_of!`) in entry `i`, with one volatile store: the programs'
    /// own updates of the other fields are left alone.
    pub fn store_u64(&self, i: u32, offset: usize, v: u64) {
        assert!(
            offset.is_multiple_of(8) && offset + 8 <= std::mem::size_of::<T>(),
            "an aligned 8-byte field inside the entry"
        );
        let i = i as usize;
        if i < self.len {
            // SAFETY: in bounds of the mapping (checked above), which is
            // writable, and 8-byte aligned (8-byte entries, aligned field).
            unsafe {
                let p = (self.base.add(i) as *mut u8).add(offset) as *mut u64;
                std::ptr::write_volatile(p, v)
            }
        }
    }
}

impl<T> Drop for ArrayView<T> {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once.
        unsafe {
            libc::munmap(self.base as *mut libc::c_void, self.bytes);
        }
    }
}
