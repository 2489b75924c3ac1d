//! Figures from measurements, for the demo, the benches and the VM tests
//! alike: the median, and fio's bandwidth log per second.
use anyhow::Result;

/// The median (sorts `v`); NaN for none.
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// (second, MiB/s) from fio bandwidth log lines `msec, KiB/s` (the first
/// two fields, as `cut -d, -f1,2` leaves them); blank lines are skipped.
pub fn bw_per_second(log: &str) -> Result<Vec<(f64, f64)>> {
    let mut v = vec![];
    for l in log.lines() {
        let f: Vec<&str> = l.split(',').map(str::trim).collect();
        if let [t, kib] = f.as_slice() {
            v.push((t.parse::<f64>()? / 1000.0, kib.parse::<f64>()? / 1024.0));
        }
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bw_log_lines_become_seconds_and_mib_s() {
        let v = bw_per_second("1000, 10240\n2000, 20480\n\n3000, 5120\n").unwrap();
        assert_eq!(v, vec![(1.0, 10.0), (2.0, 20.0), (3.0, 5.0)]);
        assert!(bw_per_second("1000, x").is_err());
    }

    #[test]
    fn the_median_is_the_middle_value_or_the_middle_pairs_mean() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(&mut []).is_nan());
    }
}
