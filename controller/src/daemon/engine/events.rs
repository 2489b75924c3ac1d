//! What wakes the engine: the servers' messages, and any dm event of any
//! map.
use std::{
    collections::HashMap,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
        mpsc,
    },
    time::Duration,
};

use anyhow::Result;

use crate::{daemon::shared::ToEngine, dm::Dm};

pub(super) enum Wake {
    Message(ToEngine),
    DmEvent,
}

/// Wakes the engine on any dm event of any map (a path failed by the
/// kernel, a table swapped), so kernel-detected failures and changes made
/// by others are seen at once, not at the next scan.
/// One channel that wakes the engine: the servers' messages (from
/// `messages`, forwarded by a thread of their own) and dm events.
pub(super) fn wake_channel(
    messages: mpsc::Receiver<ToEngine>,
    stop: Arc<AtomicBool>,
) -> Result<mpsc::Receiver<Wake>> {
    let (wake_tx, wake) = mpsc::channel::<Wake>();
    let tx = wake_tx.clone();
    std::thread::Builder::new()
        .name("control".into())
        .spawn(move || {
            while let Ok(m) = messages.recv() {
                if tx.send(Wake::Message(m)).is_err() {
                    break;
                }
            }
        })?;
    spawn_event_watcher(wake_tx, stop)?;
    Ok(wake)
}

fn spawn_event_watcher(tx: mpsc::Sender<Wake>, stop: Arc<AtomicBool>) -> Result<()> {
    let dm = Dm::open()?;
    std::thread::Builder::new()
        .name("dm-events".into())
        .spawn(move || {
            let mut last: HashMap<String, u32> = HashMap::new();
            while !stop.load(Ordering::SeqCst) {
                // Armed before the counters are read: an event after the
                // read wakes the poll below.
                if dm.arm_events().is_err() {
                    std::thread::sleep(Duration::from_secs(1));
                    continue;
                }
                let Ok(list) = dm.list() else {
                    std::thread::sleep(Duration::from_secs(1));
                    continue;
                };
                let mut changed = false;
                let mut now: HashMap<String, u32> = HashMap::new();
                for m in &list {
                    let ev = m.event_nr.unwrap_or(0);
                    if last.get(&m.name).is_some_and(|old| *old != ev) {
                        changed = true;
                    }
                    now.insert(m.name.clone(), ev);
                }
                // A map that appeared or went is a change too.
                changed |= !last.is_empty() && now.len() != last.len();
                last = now;
                if changed && tx.send(Wake::DmEvent).is_err() {
                    break;
                }
                let _ = dm.poll_events(Duration::from_secs(1));
            }
        })?;
    Ok(())
}
