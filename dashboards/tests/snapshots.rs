//! Layout snapshots from a fixed model. The expected screens are committed
//! under tests/snapshots/; after an intended layout change, regenerate them
//! with PATHPILOT_UPDATE_SNAPSHOTS=1 and review the diff.
use pathpilot_dashboards::{
    app::{Key, Pane, Ui},
    model::{DecisionView, MapView, Model, PathView, SizeClassView},
    render_text,
};

fn path(dev: &str, hctl: &str, mm: &str, mib: f64, share: f64, w: &str, failed: bool) -> PathView {
    PathView {
        device: dev.into(),
        hctl: hctl.into(),
        dev: mm.into(),
        dm_state: if failed { "failed" } else { "active" }.into(),
        checker: if failed { "faulty" } else { "ready" }.into(),
        iops: mib * 16.0,
        mib_s: mib,
        share_pct: share,
        avg_kib: if failed { 0.0 } else { 64.0 },
        merge_pct: 0.0,
        lat_p50_us: (!failed).then_some(2100.0),
        lat_p99_us: (!failed).then_some(15800.0),
        inflight: if failed { 0 } else { 4 },
        weight: w.into(),
        history: (0..60)
            .map(|i| ((mib * 1024.0) as u64 * (50 + i % 7)) / 56)
            .collect(),
        lat_by_size: if failed {
            vec![]
        } else {
            vec![
                SizeClassView {
                    class: "<16k".into(),
                    samples: 10,
                    p50_us: Some(180.0),
                    p99_us: Some(900.0),
                },
                SizeClassView {
                    class: "64k-256k".into(),
                    samples: (mib * 16.0) as u64,
                    p50_us: Some(2100.0),
                    p99_us: Some(15800.0),
                },
            ]
        },
    }
}

fn model() -> Model {
    Model {
        source: "daemon".into(),
        interval_s: 1.0,
        maps: vec![
            MapView {
                name: "mpatha".into(),
                wwid: "35000c500deadbeef".into(),
                dm_dev: "dm-0".into(),
                selector: "service-time 0".into(),
                features: "1 queue_if_no_path".into(),
                state: "degraded".into(),
                tuner: "converged".into(),
                iops: 1120.0,
                mib_s: 70.0,
                paths: vec![
                    path("sda", "0:0:0:0", "8:0", 10.0, 14.3, "13", false),
                    path("sdb", "1:0:0:0", "8:16", 20.0, 28.6, "25", false),
                    path("sdc", "2:0:0:0", "8:32", 40.0, 57.1, "50", false),
                    path("sdd", "3:0:0:0", "8:48", 0.0, 0.0, "100", true),
                ],
                size_hist: vec![(4096, 10), (65536, 1000), (131072, 30)],
                lat_hist: vec![(1 << 20, 400), (1 << 21, 500), (1 << 24, 100)],
                cgroups: vec![("/fio".into(), 97.5), ("/".into(), 2.5)],
            },
            MapView {
                name: "mpathb".into(),
                wwid: "36001405aabbccdd".into(),
                dm_dev: "dm-1".into(),
                selector: "round-robin 0".into(),
                features: "0".into(),
                state: "no paths".into(),
                tuner: "observe".into(),
                ..Default::default()
            },
        ],
        decisions: vec![
            DecisionView {
                time: "12:00:01".into(),
                map: "mpatha".into(),
                knob: "selector".into(),
                change: "round-robin -> service-time".into(),
                reason: "paths differ 8x in capacity; +212% MiB/s".into(),
                outcome: "kept".into(),
            },
            DecisionView {
                time: "12:00:31".into(),
                map: "mpatha".into(),
                knob: "max_sectors_kb".into(),
                change: "1280 -> 512".into(),
                reason: "+0.4% MiB/s, within noise (2.1%)".into(),
                outcome: "reverted".into(),
            },
        ],
        hidden_maps: 0,
        cgroups_not_counted: false,
    }
}

/// A SAN host's view: 16 LUNs of 4 paths each.
fn san() -> Model {
    let maps = (0..16u8)
        .map(|i| {
            let name = format!("mpath{}", (b'a' + i) as char);
            MapView {
                name: name.clone(),
                wwid: format!("36001405{i:02x}c3d4e5f6047189a0bc1d2e"),
                dm_dev: format!("dm-{i}"),
                selector: "service-time 0".into(),
                state: "ok".into(),
                tuner: "tune".into(),
                mib_s: f64::from(i),
                paths: (0..4)
                    .map(|p| {
                        let dev = format!("sd{}{}", (b'a' + i) as char, (b'a' + p) as char);
                        path(&dev, "0:0:0:0", "8:0", 1.0, 25.0, "1", false)
                    })
                    .collect(),
                ..Default::default()
            }
        })
        .collect();
    Model {
        source: "daemon".into(),
        interval_s: 1.0,
        maps,
        decisions: vec![DecisionView {
            time: "12:00:01".into(),
            map: "mpathp".into(),
            knob: "selector".into(),
            change: "round-robin -> service-time".into(),
            reason: "paths differ".into(),
            outcome: "kept".into(),
        }],
        hidden_maps: 0,
        cgroups_not_counted: false,
    }
}

#[test]
fn sixteen_maps_scroll_with_the_selection() {
    let m = san();
    let mut ui = Ui::default();
    let s = render_text(&m, &ui, 80, 24);
    assert!(s.contains("16 maps"), "{s}");
    assert!(s.contains("maps 1-6 of 16"), "{s}");
    assert!(s.contains("mpathf ") && !s.contains("mpathg "), "{s}");
    for _ in 0..15 {
        ui.key(Key::Down, &m);
    }
    let s = render_text(&m, &ui, 80, 24);
    assert!(s.contains("maps 11-16 of 16"), "{s}");
    assert!(
        s.contains("paths of mpathp"),
        "the last map selected and shown:\n{s}"
    );
    assert!(!s.contains("mpatha "), "{s}");
    // Taller screens show more maps at once.
    let s = render_text(&m, &Ui::default(), 160, 60);
    assert!(s.contains("maps 1-12 of 16"), "{s}");
    check("80x24-sixteen-maps-last", &render_text(&m, &ui, 80, 24));
}

#[test]
fn a_filter_narrows_the_maps_and_their_decisions() {
    let m = san();
    let mut ui = Ui::default();
    for k in [
        Key::Char('/'),
        Key::Char('M'),
        Key::Char('p'),
        Key::Char('p'),
    ] {
        assert_eq!(
            ui.key(k, &m),
            None,
            "keys go to the filter, p does not pause"
        );
    }
    let s = render_text(&m, &ui, 80, 24);
    assert!(s.contains("filter: Mpp_"), "{s}");
    assert!(s.contains("no map matches /Mpp/"), "{s}");
    ui.key(Key::Backspace, &m);
    ui.key(Key::Char('a'), &m);
    ui.key(Key::Char('t'), &m);
    ui.key(Key::Char('h'), &m);
    ui.key(Key::Char('p'), &m);
    ui.key(Key::Enter, &m);
    assert!(!ui.editing_filter);
    let s = render_text(&m, &ui, 80, 24);
    assert!(s.contains("16 maps | 1 match /Mpathp/"), "{s}");
    assert!(
        s.contains("paths of mpathp") && !s.contains("mpatha"),
        "{s}"
    );
    assert!(
        s.contains("round-robin -> service-time"),
        "its decision stays:\n{s}"
    );
    // Requests name the map shown, not the map at that index unfiltered.
    let shown = ui.shown(&m);
    assert_eq!(
        ui.key(Key::Char('p'), &shown),
        Some(pathpilot_dashboards::app::Request::TogglePause {
            map: "mpathp".into()
        })
    );
    // By WWID and by dm device too; Esc clears.
    ui.filter = "36001405".into();
    assert_eq!(ui.shown(&m).maps.len(), 16);
    ui.filter = "dm-3".into();
    assert_eq!(ui.shown(&m).maps[0].name, "mpathd");
    ui.key(Key::Char('/'), &m);
    ui.key(Key::Esc, &m);
    assert_eq!((ui.filter.as_str(), ui.shown(&m).maps.len()), ("", 16));
    assert_eq!(
        ui.key(Key::Interrupt, &m),
        Some(pathpilot_dashboards::app::Request::Quit)
    );
}

fn check(name: &str, got: &str) {
    let path = format!("{}/tests/snapshots/{name}.txt", env!("CARGO_MANIFEST_DIR"));
    if std::env::var_os("PATHPILOT_UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&path, got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|_| {
        panic!("missing snapshot {path}; run with PATHPILOT_UPDATE_SNAPSHOTS=1")
    });
    assert_eq!(got, want, "screen {name} differs from {path}:\n{got}");
}

#[test]
fn small_terminal() {
    let s = render_text(&model(), &Ui::default(), 80, 24);
    // The essentials fit in 80x24: every path, its state and throughput.
    for w in [
        "mpatha",
        "sda",
        "sdd",
        "failed",
        "faulty",
        "40.0",
        "tuner decisions",
    ] {
        assert!(s.contains(w), "{w} missing:\n{s}");
    }
    check("80x24", &s);
}

#[test]
fn large_terminal() {
    let s = render_text(&model(), &Ui::default(), 160, 50);
    for w in [
        "H:C:T:L",
        "2:0:0:0",
        "request size",
        "latency",
        "/fio",
        "64K",
        "queue_if_no_path",
    ] {
        assert!(s.contains(w), "{w} missing:\n{s}");
    }
    check("160x50", &s);
}

#[test]
fn cgroups_not_counted_are_said_so_not_shown_as_none() {
    let mut m = model();
    m.maps[0].cgroups.clear();
    let s = render_text(&m, &Ui::default(), 160, 50);
    assert!(!s.contains("not counted"), "{s}");
    m.cgroups_not_counted = true;
    let s = render_text(&m, &Ui::default(), 160, 50);
    assert!(
        s.contains("not counted") && s.contains("(bio_probe = false)"),
        "{s}"
    );
}

#[test]
fn a_selected_path_shows_its_latency_by_request_size() {
    let m = model();
    let mut ui = Ui {
        pane: Pane::Paths,
        ..Default::default()
    };
    ui.key(Key::Down, &m);
    let s = render_text(&m, &ui, 160, 50);
    for w in [
        "sdb: latency by request size",
        "SIZE",
        "<16k",
        "180us",
        "64k-256k",
        "320",
        "2.1ms",
        "16ms",
    ] {
        assert!(s.contains(w), "{w} missing:\n{s}");
    }
    assert!(
        !s.contains("┌ request size"),
        "the map's histograms make room:\n{s}"
    );
    check("160x50-path", &s);
    // A failed path completed nothing: said, not left blank.
    for _ in 0..2 {
        ui.key(Key::Down, &m);
    }
    let s = render_text(&m, &ui, 160, 50);
    assert!(s.contains("sdd: latency by request size"), "{s}");
    assert!(s.contains("no completions"), "{s}");
    // Back on the maps pane: the map's histograms again.
    ui.key(Key::Tab, &m);
    ui.key(Key::Tab, &m);
    let s = render_text(&m, &ui, 160, 50);
    assert_eq!(ui.pane, Pane::Maps);
    assert!(
        s.contains("┌ request size") && !s.contains("by request size"),
        "{s}"
    );
}

#[test]
fn empty_map_selected() {
    let m = model();
    let mut ui = Ui::default();
    ui.key(Key::Down, &m);
    let s = render_text(&m, &ui, 80, 24);
    assert!(s.contains("paths of mpathb"), "{s}");
    assert!(s.contains("no paths"), "{s}");
    check("80x24-empty-map", &s);
}

#[test]
fn no_maps_at_all() {
    let m = Model {
        source: "observer (read-only)".into(),
        interval_s: 0.5,
        ..Default::default()
    };
    let s = render_text(&m, &Ui::default(), 80, 24);
    assert!(s.contains("no multipath maps"), "{s}");
    assert!(s.contains("every 500ms"), "{s}");
}

#[test]
fn confirm_and_help_overlays() {
    let m = model();
    let mut ui = Ui {
        pane: Pane::Paths,
        ..Default::default()
    };
    ui.key(Key::Down, &m);
    ui.key(Key::Down, &m);
    ui.key(Key::Down, &m);
    ui.key(Key::Char('f'), &m);
    let s = render_text(&m, &ui, 80, 24);
    assert!(s.contains("fail path sdd of mpatha? (y/n)"), "{s}");
    ui.key(Key::Esc, &m);
    ui.key(Key::Char('?'), &m);
    let s = render_text(&m, &ui, 80, 24);
    assert!(s.contains("pause / resume the tuner"), "{s}");
}

#[test]
fn tiny_terminal_does_not_panic() {
    for (w, h) in [(20, 5), (1, 1), (80, 10), (40, 24)] {
        render_text(&model(), &Ui::default(), w, h);
    }
}
