//! Member offsets of kernel structs, and type ids, from the kernel's BTF
//! (/sys/kernel/btf/vmlinux). The request probes read `struct request`
//! itself and need the running kernel's layout: nothing is assumed. They
//! attach by the ids of the tracepoints' `btf_trace_*` typedefs.
use super::ObserveError;

pub(super) const KIND_PTR: u32 = 2;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_ENUM: u32 = 6;
pub(super) const KIND_TYPEDEF: u32 = 8;

/// A BTF blob and where each type starts in it; members are decoded only
/// for the structs asked about (the kernel's BTF holds ~100k types, and
/// decoding them all costs the collector megabytes it never needs).
pub struct Btf {
    data: Vec<u8>,
    types: std::ops::Range<usize>,
    strs: std::ops::Range<usize>,
    /// Byte offset of type id `i + 1` inside the type section.
    pos: Vec<u32>,
}

fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(off..off + 4)?.try_into().ok()?))
}

impl Btf {
    pub fn from_sys() -> Result<Self, ObserveError> {
        let b = std::fs::read("/sys/kernel/btf/vmlinux").map_err(|_| ObserveError::NoBtf)?;
        Self::parse(b).map_err(|e| ObserveError::Layout(format!("kernel BTF: {e}")))
    }

    pub fn parse(data: Vec<u8>) -> Result<Self, String> {
        let b = &data;
        if b.len() < 24 || b[0..2] != [0x9f, 0xeb] {
            return Err("not little-endian BTF".into());
        }
        let h = |o| u32_at(b, o).ok_or("truncated header");
        let hdr_len = h(4)? as usize;
        let (type_off, type_len) = (h(8)? as usize, h(12)? as usize);
        let (str_off, str_len) = (h(16)? as usize, h(20)? as usize);
        let types = hdr_len + type_off..hdr_len + type_off + type_len;
        let strs = hdr_len + str_off..hdr_len + str_off + str_len;
        if types.end > b.len() || strs.end > b.len() {
            return Err("sections out of range".into());
        }
        let tb = &b[types.clone()];
        let mut pos = Vec::new();
        let mut p = 0usize;
        while p + 12 <= tb.len() {
            let info = u32_at(tb, p + 4).ok_or("truncated type")?;
            let kind = (info >> 24) & 0x1f;
            let vlen = (info & 0xffff) as usize;
            let extra = match kind {
                1 | 14 | 17 => 4,          // int, var, decl_tag
                3 => 12,                   // array
                4 | 5 => vlen * 12,        // struct, union
                6 | 13 => vlen * 8,        // enum, func_proto
                15 | 19 => vlen * 12,      // datasec, enum64
                2 | 7..=12 | 16 | 18 => 0, // ptr, fwd, typedef, qualifiers, func, float, type_tag
                k => return Err(format!("unknown BTF kind {k} at type {}", pos.len() + 1)),
            };
            pos.push(p as u32);
            p += 12 + extra;
        }
        Ok(Btf {
            data,
            types,
            strs,
            pos,
        })
    }

    fn tb(&self) -> &[u8] {
        &self.data[self.types.clone()]
    }

    fn name(&self, off: u32) -> &[u8] {
        let s = &self.data[self.strs.clone()];
        let s = s.get(off as usize..).unwrap_or(&[]);
        let end = s.iter().position(|c| *c == 0).unwrap_or(s.len());
        &s[..end]
    }

    /// (kind, name_off, info, size_or_type, byte position) of type `id`.
    fn header(&self, id: u32) -> Option<(u32, u32, u32, u32, usize)> {
        let p = *self.pos.get((id as usize).checked_sub(1)?)? as usize;
        let tb = self.tb();
        let info = u32_at(tb, p + 4)?;
        Some((
            (info >> 24) & 0x1f,
            u32_at(tb, p)?,
            info,
            u32_at(tb, p + 8)?,
            p,
        ))
    }

    /// Byte offset of `member` in `struct name`, looking into anonymous
    /// structs and unions as C does.
    pub fn member_offset(&self, name: &str, member: &str) -> Result<u32, String> {
        let id = (1..=self.pos.len() as u32)
            .find(|&id| {
                self.header(id)
                    .is_some_and(|(k, n, ..)| k == KIND_STRUCT && self.name(n) == name.as_bytes())
            })
            .ok_or_else(|| format!("the kernel has no struct {name}"))?;
        self.find(id, member.as_bytes(), 0, 0)
            .map(|bits| bits / 8)
            .ok_or_else(|| format!("struct {name} has no member {member}"))
    }

    /// The type id of `typedef name`.
    pub fn typedef_id(&self, name: &str) -> Result<u32, String> {
        (1..=self.pos.len() as u32)
            .find(|&id| {
                self.header(id)
                    .is_some_and(|(k, n, ..)| k == KIND_TYPEDEF && self.name(n) == name.as_bytes())
            })
            .ok_or_else(|| format!("the kernel has no typedef {name}"))
    }

    /// The value of `enumerator` in `enum name`.
    pub fn enum_value(&self, name: &str, enumerator: &str) -> Result<u32, String> {
        let (_, _, info, _, p) = (1..=self.pos.len() as u32)
            .filter_map(|id| self.header(id))
            .find(|(k, n, ..)| *k == KIND_ENUM && self.name(*n) == name.as_bytes())
            .ok_or_else(|| format!("the kernel has no enum {name}"))?;
        let tb = self.tb();
        (0..(info & 0xffff) as usize)
            .find_map(|i| {
                let e = p + 12 + i * 8;
                (self.name(u32_at(tb, e)?) == enumerator.as_bytes()).then(|| u32_at(tb, e + 4))?
            })
            .ok_or_else(|| format!("enum {name} has no {enumerator}"))
    }

    fn find(&self, mut id: u32, member: &[u8], base: u32, depth: u32) -> Option<u32> {
        if depth > 8 {
            return None;
        }
        // Through typedefs and qualifiers to the struct or union.
        for _ in 0..16 {
            let (k, _, _, next, _) = self.header(id)?;
            if matches!(k, 8..=11 | 18) {
                id = next;
            } else {
                break;
            }
        }
        let (kind, _, info, _, p) = self.header(id)?;
        if kind != KIND_STRUCT && kind != KIND_UNION {
            return None;
        }
        let (vlen, kflag) = ((info & 0xffff) as usize, info >> 31 == 1);
        let tb = self.tb();
        let member_at = |i: usize| {
            let m = p + 12 + i * 12;
            let off = u32_at(tb, m + 8)?;
            Some((
                u32_at(tb, m)?,
                u32_at(tb, m + 4)?,
                if kflag { off & 0xff_ffff } else { off },
            ))
        };
        for i in 0..vlen {
            let (n, _, off) = member_at(i)?;
            if self.name(n) == member {
                return Some(base + off);
            }
        }
        for i in 0..vlen {
            let (n, t, off) = member_at(i)?;
            if self.name(n).is_empty()
                && let Some(o) = self.find(t, member, base + off, depth + 1)
            {
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
        assert_eq!(btf.enum_value("req_op", "REQ_OP_FLUSH").unwrap(), 2);
        assert!(btf.enum_value("req_op", "REQ_OP_NONSENSE").is_err());
        let issue = btf.typedef_id("btf_trace_block_rq_issue").unwrap();
        let complete = btf.typedef_id("btf_trace_block_rq_complete").unwrap();
        assert!(issue > 0 && complete > 0 && issue != complete);
        assert!(btf.typedef_id("btf_trace_no_such_event").is_err());
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(Btf::parse(vec![]).is_err());
        let mut h = vec![0x9f, 0xeb, 1, 0, 24, 0, 0, 0, 0, 0, 0, 0, 255, 255, 0, 0];
        h.extend([0u8; 8]);
        assert!(Btf::parse(h).is_err());
    }
}
