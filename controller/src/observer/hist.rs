//! log2 histograms as the eBPF programs fill them: bucket k counts values in
//! `[2^k, 2^(k+1))` (bucket 0 also holds 0), the last bucket everything above.

/// Lower bound of bucket `k`.
pub fn bucket_low(k: usize) -> u64 {
    if k == 0 { 0 } else { 1u64 << k }
}

/// Exclusive upper bound of bucket `k`.
pub fn bucket_high(k: usize) -> u64 {
    1u64.checked_shl(k as u32 + 1).unwrap_or(u64::MAX)
}

pub fn total(hist: &[u64]) -> u64 {
    hist.iter().sum()
}

/// The `p`-quantile (0 < p <= 1) of the values behind a log2 histogram,
/// interpolated linearly inside the bucket that holds it: the exact value is
/// lost in the bucketing, so this is an estimate within a factor of 2 by
/// construction, and monotone in `p`. `None` for an empty histogram.
pub fn quantile(hist: &[u64], p: f64) -> Option<f64> {
    let n = total(hist);
    if n == 0 || !(p > 0.0 && p <= 1.0) {
        return None;
    }
    let rank = (p * n as f64).ceil().max(1.0);
    let mut below = 0u64;
    for (k, &c) in hist.iter().enumerate() {
        if c == 0 {
            continue;
        }
        if (below + c) as f64 >= rank {
            let frac = (rank - below as f64) / c as f64;
            let (lo, hi) = (bucket_low(k) as f64, bucket_high(k) as f64);
            return Some(lo + (hi - lo) * frac);
        }
        below += c;
    }
    None
}

/// Per-bucket difference `cur - prev`, for interval histograms from two
/// cumulative snapshots (saturating: a device's counters can restart when
/// its map entry was deleted and recreated).
pub fn delta(cur: &[u64], prev: &[u64]) -> Vec<u64> {
    cur.iter()
        .zip(prev.iter().chain(std::iter::repeat(&0)))
        .map(|(c, p)| c.saturating_sub(*p))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_bounds() {
        assert_eq!((bucket_low(0), bucket_high(0)), (0, 2));
        assert_eq!((bucket_low(16), bucket_high(16)), (65536, 131072));
        assert_eq!(bucket_high(63), u64::MAX);
    }

    #[test]
    fn quantile_of_one_bucket_interpolates_inside_it() {
        let mut h = [0u64; 32];
        h[16] = 100;
        // All 100 values are in [64 KiB, 128 KiB).
        let p50 = quantile(&h, 0.5).unwrap();
        assert_eq!(p50, 65536.0 + 65536.0 * 0.5);
        assert_eq!(quantile(&h, 1.0).unwrap(), 131072.0);
        assert_eq!(quantile(&h, 0.01).unwrap(), 65536.0 + 655.36);
    }

    #[test]
    fn quantile_picks_the_right_bucket() {
        let mut h = [0u64; 40];
        h[10] = 90; // 90 values in [1024, 2048)
        h[20] = 10; // 10 values in [1 Mi, 2 Mi)
        let p50 = quantile(&h, 0.5).unwrap();
        assert!((1024.0..2048.0).contains(&p50));
        let p90 = quantile(&h, 0.9).unwrap();
        assert_eq!(p90, 2048.0);
        let p99 = quantile(&h, 0.99).unwrap();
        assert!((1048576.0..=2097152.0).contains(&p99));
        assert!(p50 <= p90 && p90 <= p99);
    }

    #[test]
    fn quantile_is_monotone() {
        let h: Vec<u64> = (0..40).map(|k| (k * 7 % 5) as u64).collect();
        let mut last = 0.0;
        for i in 1..=100 {
            let q = quantile(&h, i as f64 / 100.0).unwrap();
            assert!(q >= last, "p{i} = {q} < {last}");
            last = q;
        }
    }

    #[test]
    fn quantile_of_nothing() {
        assert_eq!(quantile(&[0; 8], 0.5), None);
        assert_eq!(quantile(&[1; 8], 0.0), None);
        assert_eq!(quantile(&[1; 8], 1.5), None);
    }

    #[test]
    fn delta_saturates() {
        assert_eq!(delta(&[5, 3, 9], &[2, 4, 9]), vec![3, 0, 0]);
        assert_eq!(delta(&[5, 3], &[]), vec![5, 3]);
    }
}
