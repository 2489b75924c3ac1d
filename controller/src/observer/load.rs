//! Loading the object without aya parsing the kernel's BTF. aya 0.14's
//! `EbpfLoader::new()` reads and parses /sys/kernel/btf/vmlinux
//! unconditionally, and that parse is the collector's whole memory peak
//! (~20 MiB over a steady 6). pathpilot's programs need no kernel BTF: no
//! CO-RE relocations, no BTF-attached programs (offsets come from our own
//! lean reader, see `btf`). So the loader runs in a thread of its own, in a
//! private mount namespace where that file reads empty; aya's parse fails
//! at once and it goes on without BTF, as `.btf(None)` asks.
//!
//! The request probes are BTF-enabled tracepoints all the same (they read
//! `struct request` in place, see the eBPF crate), and aya attaches one by
//! the kernel's type id of its `btf_trace_<event>` typedef, looked up in
//! an `aya::Btf`. The lean reader finds those ids, and aya gets an index
//! built from them (`attach_index`), not the kernel's BTF.
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

/// An `aya::Btf` in which each `(id, name)` is a typedef named `name` at
/// type id `id`, as in the kernel's BTF, and every other id up to the
/// largest is a nameless placeholder (a pointer to void): all aya reads
/// of it is the id of a name. A few hundred KiB where the kernel's BTF
/// parsed by aya is tens of MiB.
pub fn attach_index(typedefs: &[(u32, String)]) -> Result<aya::Btf, String> {
    use super::btf::{KIND_PTR, KIND_TYPEDEF};
    let last = typedefs.iter().map(|(id, _)| *id).max().unwrap_or(0);
    let mut strings = vec![0u8];
    let mut names = std::collections::HashMap::new();
    for (id, name) in typedefs {
        if *id == 0 || names.insert(*id, strings.len() as u32).is_some() {
            return Err(format!("type id {id} given twice, or 0"));
        }
        strings.extend(name.as_bytes());
        strings.push(0);
    }
    let mut types = Vec::with_capacity(last as usize * 12);
    for id in 1..=last {
        let (name_off, kind) = names.get(&id).map_or((0, KIND_PTR), |n| (*n, KIND_TYPEDEF));
        for word in [name_off, kind << 24, 0] {
            types.extend(word.to_le_bytes());
        }
    }
    let mut blob = Vec::with_capacity(24 + types.len() + strings.len());
    blob.extend([0x9f, 0xeb, 1, 0]); // magic, version 1, no flags
    for word in [
        24,
        0,
        types.len() as u32,
        types.len() as u32,
        strings.len() as u32,
    ] {
        blob.extend(u32::to_le_bytes(word));
    }
    blob.extend(types);
    blob.extend(strings);
    aya::Btf::parse(&blob, aya::Endianness::Little).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use aya_obj::btf::BtfKind;

    #[test]
    fn the_index_names_each_typedef_at_its_id() {
        let index = attach_index(&[
            (28883, "btf_trace_block_rq_issue".into()),
            (5, "btf_trace_block_rq_complete".into()),
        ])
        .unwrap();
        let id = |n: &str| index.id_by_type_name_kind(n, BtfKind::Typedef);
        assert_eq!(id("btf_trace_block_rq_issue").unwrap(), 28883);
        assert_eq!(id("btf_trace_block_rq_complete").unwrap(), 5);
        assert!(id("btf_trace_block_rq_requeue").is_err());
        assert!(attach_index(&[(3, "a".into()), (3, "b".into())]).is_err());
    }
}
