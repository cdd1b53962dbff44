//! Numbers for people, shared by every room: durations, amounts in a profile's unit, sizes
//! (printed and parsed) and dates. Keys and digests are printed with `wprof_cache::hex`.

/// A duration in the profile's unit (ns), for people: `812 ns`, `3.41 µs`, `12.0 ms`, `2.31 s`.
pub fn format_ns(ns: u64) -> String {
    let v = ns as f64;
    if ns < 1_000 {
        format!("{ns} ns")
    } else if ns < 1_000_000 {
        format!("{:.2} µs", v / 1e3)
    } else if ns < 1_000_000_000 {
        format!("{:.2} ms", v / 1e6)
    } else {
        format!("{:.2} s", v / 1e9)
    }
}

/// An amount in a profile's unit, for people: durations for `ns`, plain counts otherwise.
pub fn format_amount(amount: u64, unit: &str) -> String {
    if unit == "ns" {
        format_ns(amount)
    } else {
        amount.to_string()
    }
}

/// Parses a size: a number of bytes, or with a suffix `K`, `M`, `G`, `T` (powers of 1024;
/// `KB`, `KiB`, ... and lowercase are accepted too).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let digits_end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(digits_end);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size (e.g. 500M, 2G, 1048576)"))?;
    let unit = unit.trim().to_ascii_lowercase();
    let unit = unit
        .strip_suffix("ib")
        .or_else(|| unit.strip_suffix('b'))
        .unwrap_or(&unit);
    let scale: u64 = match unit {
        "" => 1,
        "k" => 1 << 10,
        "m" => 1 << 20,
        "g" => 1 << 30,
        "t" => 1 << 40,
        _ => return Err(format!("{s:?} is not a size (e.g. 500M, 2G, 1048576)")),
    };
    let bytes = value * scale as f64;
    if !bytes.is_finite() || bytes > u64::MAX as f64 {
        return Err(format!("{s:?} is too large"));
    }
    Ok(bytes as u64)
}

/// A size for people: `532 B`, `1.5 KiB`, `12.3 MiB`.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// A time (ms since the Unix epoch) for people, in UTC: `2026-11-22 01:54:05`.
pub fn format_time(ms: u64) -> String {
    if ms == 0 {
        return "-".to_string();
    }
    let secs = ms / 1000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (proleptic Gregorian calendar).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// `part` as a percentage of `whole`, one decimal (`50.0%`; `-` when `whole` is 0).
pub fn percent(part: u64, whole: u64) -> String {
    if whole == 0 {
        return "-".to_string();
    }
    format!("{:.1}%", part as f64 * 100.0 / whole as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(format_ns(812), "812 ns");
        assert_eq!(format_ns(3_410), "3.41 µs");
        assert_eq!(format_ns(12_000_000), "12.00 ms");
        assert_eq!(format_ns(2_310_000_000), "2.31 s");
        assert_eq!(format_amount(12, "instructions"), "12");
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("1048576"), Ok(1 << 20));
        assert_eq!(parse_size("500M"), Ok(500 << 20));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("1.5k"), Ok(1536));
        assert_eq!(parse_size(" 10 KB "), Ok(10 << 10));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("5X").is_err());
        assert_eq!(format_size(532), "532 B");
        assert_eq!(format_size(1536), "1.5 KiB");
    }

    #[test]
    fn dates() {
        assert_eq!(format_time(0), "-");
        assert_eq!(format_time(1_000), "1970-01-01 00:00:01");
        // 2024-02-29 12:34:56 UTC (a leap day).
        assert_eq!(format_time(1_709_210_096_000), "2024-02-29 12:34:56");
        assert_eq!(format_time(951_782_400_000), "2000-02-29 00:00:00");
    }
}
