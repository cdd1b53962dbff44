//! Medians, for the benchmarks and the start-up calibration (which report medians, never
//! means, of repeated measurements).

/// The median of `v` (the upper one of the two middle values for an even count).
///
/// # Panics
///
/// If `v` is empty: every caller measures at least once.
pub fn median<T: PartialOrd>(mut v: Vec<T>) -> T {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    v.swap_remove(v.len() / 2)
}

#[cfg(test)]
mod tests {
    #[test]
    fn medians() {
        assert_eq!(super::median(vec![5u64, 1, 3]), 3);
        assert_eq!(super::median(vec![4u64, 1, 3, 2]), 3);
        assert_eq!(super::median(vec![2.5f64, 0.5]), 2.5);
    }
}
