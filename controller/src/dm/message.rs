//! The multipath target's messages (`multipath_message` in dm-mpath.c):
//! changes that need no reload and so cause no stall.
use std::fmt;

use crate::blockdev::DevNum;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    FailPath(DevNum),
    ReinstatePath(DevNum),
    /// 1-based group numbers, as the table orders them.
    SwitchGroup(usize),
    EnableGroup(usize),
    DisableGroup(usize),
    QueueIfNoPath,
    FailIfNoPath,
}

impl Message {
    /// The message text the kernel parses.
    pub fn render(&self) -> String {
        match self {
            Message::FailPath(d) => format!("fail_path {d}"),
            Message::ReinstatePath(d) => format!("reinstate_path {d}"),
            Message::SwitchGroup(g) => format!("switch_group {g}"),
            Message::EnableGroup(g) => format!("enable_group {g}"),
            Message::DisableGroup(g) => format!("disable_group {g}"),
            Message::QueueIfNoPath => "queue_if_no_path".into(),
            Message::FailIfNoPath => "fail_if_no_path".into(),
        }
    }

    /// What an errno means for this message.
    pub(super) fn hint(&self, errno: i32) -> Option<String> {
        match errno {
            libc::EBUSY => Some("the map is suspended (a reload in progress?); try again".into()),
            libc::EINVAL => Some(match self {
                Message::FailPath(d) | Message::ReinstatePath(d) => {
                    format!("{d} is not a path of this map")
                }
                Message::SwitchGroup(g) | Message::EnableGroup(g) | Message::DisableGroup(g) => {
                    format!("the map has no path group {g}")
                }
                _ => "the kernel did not accept the message".into(),
            }),
            _ => None,
        }
    }
}

impl fmt::Display for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_kernel_syntax() {
        assert_eq!(
            Message::FailPath(DevNum::new(8, 16)).render(),
            "fail_path 8:16"
        );
        assert_eq!(
            Message::ReinstatePath(DevNum::new(8, 0)).render(),
            "reinstate_path 8:0"
        );
        assert_eq!(Message::SwitchGroup(2).render(), "switch_group 2");
        assert_eq!(Message::QueueIfNoPath.render(), "queue_if_no_path");
    }
}
