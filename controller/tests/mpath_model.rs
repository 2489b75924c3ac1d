//! The map model against a corpus of real table/status strings, plus
//! property tests: generated models survive render -> parse, and no input
//! makes the parsers panic or render something else than they read.

use pathpilot::mpath::{
    CpuMask, DevNum, Feature, GroupState, GroupStatus, HwHandler, MultipathStatus, MultipathTable,
    Path, PathArgs, PathState, PathStatus, PriorityGroup, QueueMode, Selector,
};
use proptest::prelude::*;

fn corpus(name: &str) -> Vec<String> {
    let path = format!("{}/tests/corpus/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

fn normalised(s: &str) -> String {
    s.split_ascii_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn table_corpus_round_trips_exactly() {
    let lines = corpus("tables.txt");
    assert!(lines.len() >= 30, "corpus too small: {}", lines.len());
    for line in &lines {
        let t = MultipathTable::parse_line(line).unwrap_or_else(|e| panic!("{line}\n{e}"));
        assert_eq!(&t.render_line(), line);
        // the kernel's form, with its trailing space
        let kernel = format!("{line} ");
        assert_eq!(MultipathTable::parse_line(&kernel).unwrap(), t);
        // the params part alone, as the ioctl returns it
        let params = line.splitn(4, ' ').nth(3).unwrap();
        let p = MultipathTable::parse_params(t.start, t.length, &format!("{params} ")).unwrap();
        assert_eq!(p, t);
        assert_eq!(p.render_params(), params);
    }
}

#[test]
fn status_corpus_round_trips_exactly() {
    let lines = corpus("status.txt");
    assert!(lines.len() >= 20, "corpus too small: {}", lines.len());
    for line in &lines {
        let s = MultipathStatus::parse_line(line).unwrap_or_else(|e| panic!("{line}\n{e}"));
        assert_eq!(&s.render_line(), line);
        assert_eq!(MultipathStatus::parse_line(&format!("{line} ")).unwrap(), s);
        assert!(s.queue_io().is_some(), "{line}");
    }
}

#[test]
fn corpus_covers_every_selector_and_feature() {
    let tables: Vec<MultipathTable> = corpus("tables.txt")
        .iter()
        .map(|l| MultipathTable::parse_line(l).unwrap())
        .collect();
    let selectors: Vec<&Selector> = tables
        .iter()
        .flat_map(|t| t.groups.iter().map(|g| &g.selector))
        .collect();
    for want in [
        Selector::RoundRobin,
        Selector::QueueLength,
        Selector::ServiceTime,
        Selector::HistoricalServiceTime,
        Selector::IoAffinity,
    ] {
        assert!(selectors.contains(&&want), "no {want} in the corpus");
    }
    assert!(selectors.iter().any(|s| matches!(s, Selector::Other(_))));
    let features: Vec<&Feature> = tables.iter().flat_map(|t| t.features.iter()).collect();
    for want in [
        Feature::QueueIfNoPath,
        Feature::RetainAttachedHwHandler,
        Feature::PgInitRetries(50),
        Feature::QueueMode(QueueMode::Mq),
        Feature::QueueMode(QueueMode::Bio),
    ] {
        assert!(features.contains(&&want), "no {want:?} in the corpus");
    }
    assert!(
        features
            .iter()
            .any(|f| matches!(f, Feature::PgInitDelayMsecs(_)))
    );
    assert!(
        tables
            .iter()
            .any(|t| t.hw_handler.as_ref().is_some_and(|h| h.name == "alua"))
    );
    assert!(
        tables
            .iter()
            .any(|t| t.hw_handler.as_ref().is_some_and(|h| !h.args.is_empty()))
    );
    assert!(tables.iter().any(|t| t.groups.len() > 1));
    assert!(
        tables
            .iter()
            .flat_map(|t| t.paths())
            .any(|p| matches!(p.args, PathArgs::CpuMask(_)))
    );

    let status: Vec<MultipathStatus> = corpus("status.txt")
        .iter()
        .map(|l| MultipathStatus::parse_line(l).unwrap())
        .collect();
    let paths = || status.iter().flat_map(|s| s.paths());
    assert!(paths().any(|p| p.state == PathState::Failed));
    let states: Vec<GroupState> = status
        .iter()
        .flat_map(|s| s.groups.iter().map(|g| g.state))
        .collect();
    for want in [
        GroupState::Active,
        GroupState::Disabled,
        GroupState::Enabled,
    ] {
        assert!(states.contains(&want));
    }
    assert!(status.iter().any(|s| s.pg_init_count().unwrap_or(0) > 0));
}

#[test]
fn corpus_read_back_facts() {
    // The service-time weights of the testbed's hetero.sh map.
    let t = MultipathTable::parse_line(
        "0 2097152 multipath 0 0 1 1 service-time 0 4 2 8:0 1 1 8:16 1 2 8:32 1 4 8:48 1 8",
    )
    .unwrap();
    let w: Vec<u32> = t
        .paths()
        .map(|p| p.args.relative_throughput().unwrap())
        .collect();
    assert_eq!(w, [1, 2, 4, 8]);
    let m = CpuMask::new("00000001,00000000").unwrap();
    assert_eq!(m.cpus(), [32]);
}

// ---------------------------------------------------------------- proptest

const KNOWN_FEATURES: [&str; 6] = [
    "queue_if_no_path",
    "retain_attached_hw_handler",
    "pg_init_retries",
    "pg_init_delay_msecs",
    "queue_mode",
    "no_partitions",
];
const KNOWN_SELECTORS: [&str; 5] = [
    "round-robin",
    "queue-length",
    "service-time",
    "historical-service-time",
    "io-affinity",
];

fn dev() -> impl Strategy<Value = DevNum> {
    (0u32..300, 0u32..4096).prop_map(|(a, b)| DevNum::new(a, b))
}

fn word() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9_.:-]{1,8}"
}

fn feature() -> impl Strategy<Value = Feature> {
    let other = (
        "[a-z_]{1,16}".prop_filter("known name", |n| !KNOWN_FEATURES.contains(&n.as_str())),
        prop::collection::vec(any::<u32>(), 0..3),
    )
        .prop_map(|(name, nums)| {
            let mut v = vec![name];
            v.extend(nums.iter().map(u32::to_string));
            Feature::Other(v)
        });
    prop_oneof![
        Just(Feature::QueueIfNoPath),
        Just(Feature::RetainAttachedHwHandler),
        Just(Feature::NoPartitions),
        any::<u32>().prop_map(Feature::PgInitRetries),
        any::<u32>().prop_map(Feature::PgInitDelayMsecs),
        prop_oneof![
            Just(QueueMode::Bio),
            Just(QueueMode::Rq),
            Just(QueueMode::Mq),
            Just(QueueMode::Nvme)
        ]
        .prop_map(Feature::QueueMode),
        other,
    ]
}

fn selector() -> impl Strategy<Value = Selector> {
    prop_oneof![
        Just(Selector::RoundRobin),
        Just(Selector::QueueLength),
        Just(Selector::ServiceTime),
        Just(Selector::HistoricalServiceTime),
        Just(Selector::IoAffinity),
        "[a-z][a-z-]{0,12}"
            .prop_filter("known", |n| !KNOWN_SELECTORS.contains(&n.as_str()))
            .prop_map(Selector::Other),
    ]
}

fn cpumask() -> impl Strategy<Value = CpuMask> {
    "[0-9a-f]{1,8}(,[0-9a-f]{8}){0,2}".prop_map(|s| CpuMask::new(&s).unwrap())
}

/// Path args of one arity that parse back into the same variant for `sel`.
fn path_args(sel: &Selector, arity: usize) -> BoxedStrategy<PathArgs> {
    match (sel, arity) {
        (_, 0) => Just(PathArgs::Empty).boxed(),
        (Selector::IoAffinity, _) => cpumask().prop_map(PathArgs::CpuMask).boxed(),
        (Selector::ServiceTime, 2) => (any::<u32>(), any::<u32>())
            .prop_map(|(r, w)| PathArgs::ServiceTime {
                repeat_count: r,
                relative_throughput: w,
            })
            .boxed(),
        (Selector::Other(_), n) => prop::collection::vec(word(), n)
            .prop_map(PathArgs::Raw)
            .boxed(),
        _ => any::<u32>().prop_map(PathArgs::RepeatCount).boxed(),
    }
}

fn group() -> impl Strategy<Value = PriorityGroup> {
    selector()
        .prop_flat_map(|sel| {
            let max_arity = match sel {
                Selector::ServiceTime => 3,
                Selector::Other(_) => 4,
                _ => 2,
            };
            (Just(sel), 0usize..max_arity, 1usize..5)
        })
        .prop_flat_map(|(sel, arity, n)| {
            let paths = prop::collection::vec(
                (dev(), path_args(&sel, arity)).prop_map(|(dev, args)| Path { dev, args }),
                n,
            );
            (Just(sel), prop::collection::vec(word(), 0..3), paths)
        })
        .prop_map(|(selector, selector_args, paths)| PriorityGroup {
            selector,
            selector_args,
            paths,
        })
}

fn table() -> impl Strategy<Value = MultipathTable> {
    (
        any::<u64>(),
        any::<u64>(),
        prop::collection::vec(feature(), 0..5),
        prop::option::of(("[a-z_]{1,8}", prop::collection::vec(word(), 0..3))),
        prop::collection::vec(group(), 0..4),
        any::<u32>(),
    )
        .prop_map(
            |(start, length, features, hw, groups, initial_pg)| MultipathTable {
                start,
                length,
                features,
                hw_handler: hw.map(|(name, args)| HwHandler { name, args }),
                initial_pg,
                groups,
            },
        )
}

fn status() -> impl Strategy<Value = MultipathStatus> {
    let group = (0usize..4, 1usize..5)
        .prop_flat_map(|(ninfo, npaths)| {
            let path = (
                dev(),
                prop_oneof![Just(PathState::Active), Just(PathState::Failed)],
                any::<u32>(),
                prop::collection::vec(word(), ninfo),
            )
                .prop_map(|(dev, state, fail_count, info)| PathStatus {
                    dev,
                    state,
                    fail_count,
                    info,
                });
            (
                prop_oneof![
                    Just(GroupState::Active),
                    Just(GroupState::Disabled),
                    Just(GroupState::Enabled)
                ],
                prop::collection::vec(word(), 0..3),
                prop::collection::vec(path, npaths),
            )
        })
        .prop_map(|(state, selector_args, paths)| GroupStatus {
            state,
            selector_args,
            paths,
        });
    (
        any::<u64>(),
        any::<u64>(),
        prop::collection::vec(word(), 0..4),
        prop::collection::vec(word(), 0..2),
        any::<u32>(),
        prop::collection::vec(group, 0..4),
    )
        .prop_map(
            |(start, length, features, hw_handler, next_pg, groups)| MultipathStatus {
                start,
                length,
                features,
                hw_handler,
                next_pg,
                groups,
            },
        )
}

/// Token soup from the grammar's own vocabulary, so that random input gets
/// past the first count more often than arbitrary text would.
fn soup() -> impl Strategy<Value = String> {
    let tok = prop_oneof![
        (0u32..6).prop_map(|n| n.to_string()),
        any::<u32>().prop_map(|n| n.to_string()),
        Just("multipath".to_owned()),
        Just("round-robin".to_owned()),
        Just("service-time".to_owned()),
        Just("io-affinity".to_owned()),
        Just("historical-service-time".to_owned()),
        Just("queue_if_no_path".to_owned()),
        Just("pg_init_retries".to_owned()),
        Just("queue_mode".to_owned()),
        Just("A".to_owned()),
        Just("F".to_owned()),
        Just("E".to_owned()),
        Just("D".to_owned()),
        Just("8:16".to_owned()),
        Just("-1".to_owned()),
        Just("007".to_owned()),
        "[ -~]{0,6}",
    ];
    (
        prop::collection::vec(tok, 0..40),
        prop_oneof![Just(" "), Just("  "), Just("\t"), Just("\n")],
    )
        .prop_map(|(v, sep)| v.join(sep))
}

fn check_any_input(s: &str) {
    let norm = normalised(s);
    if let Ok(t) = MultipathTable::parse_line(s) {
        assert_eq!(t.render_line(), norm);
        assert_eq!(MultipathTable::parse_line(&t.render_line()), Ok(t));
    }
    if let Ok(t) = MultipathTable::parse_params(0, 1, s) {
        assert_eq!(t.render_params(), norm);
    }
    if let Ok(st) = MultipathStatus::parse_line(s) {
        assert_eq!(st.render_line(), norm);
        assert_eq!(MultipathStatus::parse_line(&st.render_line()), Ok(st));
    }
    if let Ok(st) = MultipathStatus::parse_params(0, 1, s) {
        assert_eq!(st.render_params(), norm);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn generated_tables_round_trip(t in table()) {
        let line = t.render_line();
        prop_assert_eq!(MultipathTable::parse_line(&line), Ok(t.clone()));
        prop_assert_eq!(MultipathTable::parse_params(t.start, t.length, &t.render_params()), Ok(t));
    }

    #[test]
    fn generated_status_round_trips(s in status()) {
        prop_assert_eq!(MultipathStatus::parse_line(&s.render_line()), Ok(s));
    }

    #[test]
    fn token_soup_never_panics(s in soup()) {
        check_any_input(&s);
        check_any_input(&format!("0 100 multipath {s}"));
    }

    #[test]
    fn arbitrary_text_never_panics(s in "\\PC{0,200}") {
        check_any_input(&s);
    }

    #[test]
    fn truncated_corpus_lines_fail_cleanly(cut in 0usize..400, which in 0usize..100) {
        let mut lines = corpus("tables.txt");
        lines.extend(corpus("status.txt"));
        let line = &lines[which % lines.len()];
        let cut = line.char_indices().map(|(i, _)| i).nth(cut).unwrap_or(line.len());
        check_any_input(&line[..cut]);
    }
}
