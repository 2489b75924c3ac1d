//! Member offsets of kernel structs, from the kernel's BTF
//! (/sys/kernel/btf/vmlinux). The completion probe is a raw tracepoint (see
//! the eBPF crate for why), so it reads `struct request` itself and needs
//! the running kernel's layout: nothing is assumed.
use std::collections::HashMap;

use super::ObserveError;

const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;

#[derive(Debug)]
struct Member {
    name: String,
    type_id: u32,
    bit_offset: u32,
}

/// The structs and unions of a BTF blob, enough to find member offsets.
pub struct Btf {
    /// type id -> (kind, name, members)
    types: HashMap<u32, (u32, String, Vec<Member>)>,
    /// type id -> the type it refers to (typedef, const, volatile, ...).
    refs: HashMap<u32, u32>,
    by_name: HashMap<String, u32>,
}

fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(off..off + 4)?.try_into().ok()?))
}

impl Btf {
    pub fn from_sys() -> Result<Self, ObserveError> {
        let b = std::fs::read("/sys/kernel/btf/vmlinux").map_err(|_| ObserveError::NoBtf)?;
        Self::parse(&b).map_err(|e| ObserveError::Layout(format!("kernel BTF: {e}")))
    }

    pub fn parse(b: &[u8]) -> Result<Self, String> {
        if b.len() < 24 || b[0..2] != [0x9f, 0xeb] {
            return Err("not little-endian BTF".into());
        }
        let h = |o| u32_at(b, o).ok_or("truncated header");
        let hdr_len = h(4)? as usize;
        let (type_off, type_len) = (h(8)? as usize, h(12)? as usize);
        let (str_off, str_len) = (h(16)? as usize, h(20)? as usize);
        let types_b = b
            .get(hdr_len + type_off..hdr_len + type_off + type_len)
            .ok_or("type section out of range")?;
        let strs = b
            .get(hdr_len + str_off..hdr_len + str_off + str_len)
            .ok_or("string section out of range")?;
        let name = |off: u32| -> String {
            let s = strs.get(off as usize..).unwrap_or(&[]);
            let end = s.iter().position(|c| *c == 0).unwrap_or(0);
            String::from_utf8_lossy(&s[..end]).into_owned()
        };
        let mut me = Btf {
            types: HashMap::new(),
            refs: HashMap::new(),
            by_name: HashMap::new(),
        };
        let mut pos = 0usize;
        let mut id = 1u32;
        while pos + 12 <= types_b.len() {
            let name_off = u32_at(types_b, pos).ok_or("truncated type")?;
            let info = u32_at(types_b, pos + 4).ok_or("truncated type")?;
            let size_or_type = u32_at(types_b, pos + 8).ok_or("truncated type")?;
            let kind = (info >> 24) & 0x1f;
            let vlen = (info & 0xffff) as usize;
            let kflag = info >> 31 == 1;
            pos += 12;
            let extra = match kind {
                1 | 14 | 17 => 4,          // int, var, decl_tag
                3 => 12,                   // array
                4 | 5 => vlen * 12,        // struct, union
                6 | 13 => vlen * 8,        // enum, func_proto
                15 | 19 => vlen * 12,      // datasec, enum64
                2 | 7..=12 | 16 | 18 => 0, // ptr, fwd, typedef, qualifiers, func, float, type_tag
                k => return Err(format!("unknown BTF kind {k} at type {id}")),
            };
            if kind == KIND_STRUCT || kind == KIND_UNION {
                let mut members = Vec::with_capacity(vlen);
                for i in 0..vlen {
                    let m = pos + i * 12;
                    let off = u32_at(types_b, m + 8).ok_or("truncated member")?;
                    members.push(Member {
                        name: name(u32_at(types_b, m).ok_or("truncated member")?),
                        type_id: u32_at(types_b, m + 4).ok_or("truncated member")?,
                        bit_offset: if kflag { off & 0xff_ffff } else { off },
                    });
                }
                let n = name(name_off);
                if !n.is_empty() && kind == KIND_STRUCT {
                    me.by_name.entry(n.clone()).or_insert(id);
                }
                me.types.insert(id, (kind, n, members));
            } else if matches!(kind, 8..=11 | 18) {
                me.refs.insert(id, size_or_type);
            }
            pos += extra;
            id += 1;
        }
        Ok(me)
    }

    /// Byte offset of `member` in `struct name`, looking into anonymous
    /// structs and unions as C does.
    pub fn member_offset(&self, name: &str, member: &str) -> Result<u32, String> {
        let id = *self
            .by_name
            .get(name)
            .ok_or_else(|| format!("the kernel has no struct {name}"))?;
        self.find(id, member, 0)
            .map(|bits| bits / 8)
            .ok_or_else(|| format!("struct {name} has no member {member}"))
    }

    fn resolve(&self, mut id: u32) -> u32 {
        for _ in 0..16 {
            match self.refs.get(&id) {
                Some(next) => id = *next,
                None => break,
            }
        }
        id
    }

    fn find(&self, id: u32, member: &str, base: u32) -> Option<u32> {
        let (_, _, members) = self.types.get(&self.resolve(id))?;
        for m in members {
            if m.name == member {
                return Some(base + m.bit_offset);
            }
        }
        for m in members.iter().filter(|m| m.name.is_empty()) {
            if let Some(o) = self.find(m.type_id, member, base + m.bit_offset) {
                return Some(o);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_running_kernel_describes_struct_request() {
        let btf = Btf::from_sys().expect("kernel BTF");
        assert_eq!(
            btf.member_offset("request", "q").unwrap(),
            0,
            "q comes first"
        );
        let sector = btf.member_offset("request", "__sector").unwrap();
        assert!(sector > 0 && sector.is_multiple_of(8), "{sector}");
        assert!(btf.member_offset("request_queue", "disk").is_ok());
        let major = btf.member_offset("gendisk", "major").unwrap();
        let minor = btf.member_offset("gendisk", "first_minor").unwrap();
        assert_eq!(minor, major + 4, "two ints side by side");
        assert!(btf.member_offset("request", "no_such_member").is_err());
        assert!(btf.member_offset("no_such_struct", "q").is_err());
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(Btf::parse(b"").is_err());
        assert!(
            Btf::parse(&[
                0x9f, 0xeb, 1, 0, 24, 0, 0, 0, 0, 0, 0, 0, 255, 255, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
            ])
            .is_err()
        );
    }
}
