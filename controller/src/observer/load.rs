//! Loading the object without aya parsing the kernel's BTF. aya 0.14's
//! `EbpfLoader::new()` reads and parses /sys/kernel/btf/vmlinux
//! unconditionally, and that parse is the collector's whole memory peak
//! (~20 MiB over a steady 6). pathpilot's programs need no kernel BTF: no
//! CO-RE relocations, no BTF-attached programs (offsets come from our own
//! lean reader, see `btf`). So the loader runs in a thread of its own, in a
//! private mount namespace where that file reads empty; aya's parse fails
//! at once and it goes on without BTF, as `.btf(None)` asks.
use std::{ffi::CString, ptr};

const VMLINUX: &str = "/sys/kernel/btf/vmlinux";

/// Hides the kernel's BTF from this thread: a private mount namespace
/// (the thread's own; the process and the host keep theirs) with
/// /dev/null bound over the file.
fn hide_kernel_btf() -> std::io::Result<()> {
    let err = std::io::Error::last_os_error;
    // SAFETY: plain syscalls on constant, NUL-terminated strings.
    unsafe {
        if libc::unshare(libc::CLONE_FS | libc::CLONE_NEWNS) != 0 {
            return Err(err());
        }
        let root = CString::new("/").unwrap();
        if libc::mount(
            ptr::null(),
            root.as_ptr(),
            ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            ptr::null(),
        ) != 0
        {
            return Err(err());
        }
        let null = CString::new("/dev/null").unwrap();
        let target = CString::new(VMLINUX).unwrap();
        if libc::mount(
            null.as_ptr(),
            target.as_ptr(),
            ptr::null(),
            libc::MS_BIND,
            ptr::null(),
        ) != 0
        {
            return Err(err());
        }
    }
    Ok(())
}

/// Runs `load` with the kernel's BTF hidden from it (see the module
/// docs); where a mount namespace cannot be made, simply runs it.
pub fn without_kernel_btf<T: Send>(load: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            // Best effort: without it the load works, with a higher peak.
            let _ = hide_kernel_btf();
            load()
        })
        .join()
        .expect("the eBPF loader thread panicked")
    })
}
