//! An ALUA array in the guest: LIO (target_core_mod) exports one LUN
//! through several tcm_loop target ports, each a SCSI host in the guest,
//! each in a target port group whose ALUA state can change while the VM
//! runs (an array failing over between its controllers).
//!
//! Two backstores:
//! - `Iblock`: one LIO device over each of the testbed's throttled QEMU
//!   disks (the same image N times), all with the same unit serial, so all
//!   report one WWID: port i has QEMU path i's cap. The raw QEMU disks are
//!   held by LIO (a map over them cannot be made; filter their WWID out).
//! - `Ramdisk`: one rd_mcp device exported through every port (no caps).
//!
//! LIO adds `nonop_delay_msecs` to each command on a non-optimized port,
//! as a real array's trip across its controller interconnect costs.
use std::fmt;

use anyhow::{Result, bail};

use crate::config::Inquiry;

/// SCSI ALUA access states (SPC-4), as LIO's `alua_access_state` takes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AluaState {
    Optimized,
    NonOptimized,
    Standby,
    Unavailable,
}

impl AluaState {
    pub fn code(self) -> u8 {
        match self {
            AluaState::Optimized => 0,
            AluaState::NonOptimized => 1,
            AluaState::Standby => 2,
            AluaState::Unavailable => 3,
        }
    }

    /// What the guest's `device/access_state` says for it.
    pub fn sysfs(self) -> &'static str {
        match self {
            AluaState::Optimized => "active/optimized",
            AluaState::NonOptimized => "active/non-optimized",
            AluaState::Standby => "standby",
            AluaState::Unavailable => "unavailable",
        }
    }
}

impl std::str::FromStr for AluaState {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "ao" | "optimized" | "active/optimized" => AluaState::Optimized,
            "an" | "non-optimized" | "active/non-optimized" => AluaState::NonOptimized,
            "s" | "standby" => AluaState::Standby,
            "u" | "unavailable" => AluaState::Unavailable,
            _ => bail!("unknown ALUA state {s:?} (ao, an, standby, unavailable)"),
        })
    }
}

impl fmt::Display for AluaState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.sysfs())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backstore {
    /// One LIO device per QEMU path: per-port caps.
    Iblock,
    /// One rd_mcp ramdisk of this many MiB behind every port.
    Ramdisk(u64),
}

/// The array: each port's target port group, each group's initial state.
#[derive(Clone, Debug, PartialEq)]
pub struct AluaSpec {
    /// Group id of port i.
    pub ports: Vec<u16>,
    pub groups: Vec<(u16, AluaState)>,
    pub nonop_delay_ms: u32,
    pub backstore: Backstore,
    /// LUNs behind every port (ramdisk backstores only): LUN j is its own
    /// ramdisk with its own serial, so its own WWID; `luns x ports` paths.
    pub luns: usize,
}

/// The LUN's unit serial: LIO makes its NAA designator (the WWID) from
/// it; without one the LUN has none and multipath cannot group it.
pub const UNIT_SERIAL: &str = "1b2c3d4e5f6047189a0bc1d2e";

/// LUN j's unit serial: LIO builds the NAA designator from the serial's
/// first 25 hex digits, so the LUN number goes inside them (LUN 0 keeps
/// [`UNIT_SERIAL`]).
pub fn unit_serial(lun: usize) -> String {
    if lun == 0 {
        return UNIT_SERIAL.to_string();
    }
    format!("{}{:03x}", &UNIT_SERIAL[..UNIT_SERIAL.len() - 3], lun)
}

impl AluaSpec {
    /// Ports from `group:state` items, e.g. `10:ao,10:ao,20:an,20:an`: a
    /// port per item; a group's state is its first item's.
    pub fn parse(s: &str) -> Result<AluaSpec> {
        let mut ports = vec![];
        let mut groups: Vec<(u16, AluaState)> = vec![];
        for item in s.split(',') {
            let Some((g, st)) = item.split_once(':') else {
                bail!("'{item}': expected GROUP:STATE (e.g. 10:ao)");
            };
            let g: u16 = g
                .parse()
                .map_err(|_| anyhow::anyhow!("'{g}' is not a group id"))?;
            if g == 0 {
                bail!("group id 0 is LIO's default group");
            }
            let st: AluaState = st.parse()?;
            if !groups.iter().any(|(x, _)| *x == g) {
                groups.push((g, st));
            }
            ports.push(g);
        }
        Ok(AluaSpec {
            ports,
            groups,
            nonop_delay_ms: 20,
            backstore: Backstore::Iblock,
            luns: 1,
        })
    }

    /// The guest script that builds the array over the raw disks (`sda`,
    /// ...: QEMU path i is `raw[i]`), installs `pp-alua` and prints one
    /// `port I sdX` line per port once every port's disk is there.
    pub fn setup_script(&self, raw: &[String], inquiry: &Inquiry) -> Result<String> {
        if self.luns == 0 || (self.luns > 1 && self.backstore == Backstore::Iblock) {
            bail!(
                "{} LUNs: an iblock array has one LUN; a ramdisk array 1 or more",
                self.luns
            );
        }
        if self.backstore == Backstore::Iblock && raw.len() < self.ports.len() {
            bail!(
                "{} ports need as many QEMU paths for iblock backstores, have {}",
                self.ports.len(),
                raw.len()
            );
        }
        let mut s = String::from(
            "set -e\n\
             mkdir -p /usr/local/bin\n\
             modprobe scsi_dh_alua\n\
             modprobe target_core_iblock; modprobe tcm_loop\n\
             mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config\n\
             T=/sys/kernel/config/target\n",
        );
        let devices: Vec<String> = match self.backstore {
            Backstore::Ramdisk(mib) => (0..self.luns)
                .map(|j| {
                    let d = format!("$T/core/rd_mcp_0/lun{j}");
                    s.push_str(&format!(
                        "mkdir -p {d}; echo rd_pages={} > {d}/control; echo 1 > {d}/enable\n",
                        mib * 256
                    ));
                    d
                })
                .collect(),
            Backstore::Iblock => (0..self.ports.len())
                .map(|i| {
                    let d = format!("$T/core/iblock_{i}/lun{i}");
                    s.push_str(&format!(
                        "mkdir -p {d}; echo udev_path=/dev/{} > {d}/control; echo 1 > {d}/enable\n",
                        raw[i]
                    ));
                    d
                })
                .collect(),
        };
        for (j, d) in devices.iter().enumerate() {
            // One iblock device per port: all of them are LUN 0.
            let lun = if self.backstore == Backstore::Iblock {
                0
            } else {
                j
            };
            s.push_str(&format!(
                "echo {} > {d}/wwn/vpd_unit_serial\n",
                unit_serial(lun)
            ));
            // What the LUN says it is (target_core's wwn/vendor_id,
            // product_id, revision): any array of the hwtable.
            for (k, v, _) in inquiry.fields() {
                let attr = match k {
                    "vendor" => "vendor_id",
                    "product" => "product_id",
                    _ => "revision",
                };
                s.push_str(&format!("echo '{v}' > {d}/wwn/{attr}\n"));
            }
            for (g, st) in &self.groups {
                s.push_str(&format!(
                    "mkdir -p {d}/alua/g{g}; echo {g} > {d}/alua/g{g}/tg_pt_gp_id\n\
                     echo 1 > {d}/alua/g{g}/alua_access_type\n\
                     echo {} > {d}/alua/g{g}/alua_access_state\n\
                     echo {} > {d}/alua/g{g}/nonop_delay_msecs\n",
                    st.code(),
                    self.nonop_delay_ms
                ));
            }
        }
        for (i, g) in self.ports.iter().enumerate() {
            // Port i exports its own iblock device, or every ramdisk LUN.
            let luns: Vec<(usize, &String)> = match self.backstore {
                Backstore::Iblock => vec![(0, &devices[i])],
                Backstore::Ramdisk(_) => devices.iter().enumerate().collect(),
            };
            let p = format!("$T/loopback/naa.5001405000000{:03x}/tpgt_1", i + 1);
            s.push_str(&format!(
                "mkdir -p {p}; echo naa.5001405000001{:03x} > {p}/nexus\n",
                i + 1
            ));
            for (j, d) in luns {
                s.push_str(&format!(
                    "mkdir -p {p}/lun/lun_{j}; ln -s {d} {p}/lun/lun_{j}/virtual_scsi_port\n\
                     echo g{g} > {p}/lun/lun_{j}/alua_tg_pt_gp\n"
                ));
            }
        }
        // The helper for tests and `xtask vm run`: the array's side of a
        // failover, on every LIO device at once.
        s.push_str(&format!(
            "cat > /usr/local/bin/pp-alua <<'EOF'\n\
             #!/bin/sh\n\
             # pp-alua state GROUP CODE | pp-alua move PORT GROUP\n\
             T=/sys/kernel/config/target\n\
             case \"$1\" in\n\
             state) for g in $T/core/*/*/alua/g$2; do echo $3 > $g/alua_access_state; done;;\n\
             move) echo g$3 > $(ls -d $T/loopback/naa.5001405000000$(printf %03x $2)/tpgt_1/lun/lun_0)/alua_tg_pt_gp;;\n\
             *) echo 'usage: pp-alua state GROUP CODE | pp-alua move PORT GROUP' >&2; exit 2;;\n\
             esac\n\
             EOF\n\
             chmod +x /usr/local/bin/pp-alua\n\
             set +e\n\
             i=0; while [ $i -lt 100 ]; do\n\
               n=0; out=\n\
               for p in $(seq 1 {n}); do\n\
                 a=$(cat $T/loopback/naa.5001405000000$(printf %03x $p)/tpgt_1/address 2>/dev/null)\n\
                 h=${{a%%:*}}\n\
                 d=$(ls /sys/class/scsi_host/host$h/device/target*/*:0/block 2>/dev/null | head -1)\n\
                 c=$(ls -d /sys/class/scsi_host/host$h/device/target*/*/block/* 2>/dev/null | wc -l)\n\
                 [ -n \"$d\" ] && [ $c -eq {luns} ] && n=$((n+1)) && out=\"$out\nport $p $d\"\n\
               done\n\
               [ $n -eq {n} ] && break\n\
               sleep 0.1; i=$((i+1))\n\
             done\n\
             printf '%b\\n' \"$out\"\n",
            n = self.ports.len(),
            luns = self.luns
        ));
        Ok(s)
    }
}

/// The script that sets group `g` to `st` on the array.
pub fn state_script(g: u16, st: AluaState) -> String {
    format!("pp-alua state {g} {}", st.code())
}

/// The script that moves port `port` (1-based) to group `g`.
pub fn move_script(port: usize, g: u16) -> String {
    format!("pp-alua move {port} {g}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse() {
        let s = AluaSpec::parse("10:ao,10:ao,20:an,20:an").unwrap();
        assert_eq!(s.ports, vec![10, 10, 20, 20]);
        assert_eq!(
            s.groups,
            vec![(10, AluaState::Optimized), (20, AluaState::NonOptimized)]
        );
        assert!(AluaSpec::parse("10").is_err());
        assert!(AluaSpec::parse("0:ao").is_err());
        assert!(AluaSpec::parse("10:fast").is_err());
        let script = s.setup_script(
            &["sda".into(), "sdb".into(), "sdc".into(), "sdd".into()],
            &Inquiry::default(),
        );
        let script = script.unwrap();
        assert!(script.contains("udev_path=/dev/sdd"), "{script}");
        assert!(script.contains("echo 1 > $T/core/iblock_3/lun3/alua/g20/alua_access_state"));
        assert!(
            s.setup_script(&["sda".into()], &Inquiry::default())
                .is_err(),
            "4 ports, 1 disk"
        );
        assert_eq!(state_script(20, AluaState::Optimized), "pp-alua state 20 0");
    }

    #[test]
    fn ramdisk_luns_each_get_their_own_serial_behind_every_port() {
        let mut s = AluaSpec::parse("10:ao,10:ao").unwrap();
        s.backstore = Backstore::Ramdisk(8);
        s.luns = 3;
        let pure = Inquiry {
            vendor: Some("PURE".into()),
            product: Some("FlashArray".into()),
            revision: None,
        };
        let script = s.setup_script(&["sda".into()], &pure).unwrap();
        assert!(script.contains("echo 'PURE' > $T/core/rd_mcp_0/lun2/wwn/vendor_id"));
        assert!(script.contains("echo 'FlashArray' > $T/core/rd_mcp_0/lun0/wwn/product_id"));
        assert!(!script.contains("wwn/revision"));
        for j in 0..3 {
            assert!(script.contains(&format!("rd_mcp_0/lun{j}; echo rd_pages=2048")));
            assert!(script.contains(&format!("echo {} > ", unit_serial(j))));
            for p in 1..=2 {
                let port = format!("naa.5001405000000{p:03x}/tpgt_1/lun/lun_{j}");
                assert!(script.contains(&port), "{port} in {script}");
            }
        }
        // LIO's NAA takes the first 25 hex digits: the LUNs differ there.
        let naa: Vec<String> = (0..20).map(|j| unit_serial(j)[..25].to_string()).collect();
        let mut uniq = naa.clone();
        uniq.sort();
        uniq.dedup();
        assert_eq!(uniq.len(), 20, "{naa:?}");
        assert_eq!(unit_serial(0), UNIT_SERIAL);
        s.backstore = Backstore::Iblock;
        assert!(
            s.setup_script(&["sda".into(), "sdb".into()], &Inquiry::default())
                .is_err()
        );
    }
}
