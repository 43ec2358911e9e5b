//! Go's `time.Duration` text (`metav1.Duration` in JSON): `String()` and
//! `ParseDuration`, on nanoseconds.

/// Formats nanoseconds as Go's `Duration.String()`: `1h2m3.5s`, `1.5ms`, `0s`.
pub fn format(nanos: i64) -> String {
    let negative = nanos < 0;
    let mut u = nanos.unsigned_abs();
    let mut text = String::new();
    if u == 0 {
        return "0s".into();
    }
    if u < 1_000_000_000 {
        let (precision, unit) = if u < 1_000 {
            (0, "ns")
        } else if u < 1_000_000 {
            (3, "µs")
        } else {
            (6, "ms")
        };
        let (int, frac) = split(u, precision);
        text.push_str(&int.to_string());
        text.push_str(&frac);
        text.push_str(unit);
    } else {
        let (seconds, frac) = split(u, 9);
        u = seconds;
        let mut tail = format!("{}{}s", u % 60, frac);
        u /= 60;
        if u > 0 {
            tail = format!("{}m{tail}", u % 60);
            u /= 60;
            if u > 0 {
                tail = format!("{u}h{tail}");
            }
        }
        text.push_str(&tail);
    }
    if negative {
        text.insert(0, '-');
    }
    text
}

/// `v / 10^precision` and its fraction as `.ddd` without trailing zeros
/// (empty when the fraction is zero), as Go's `fmtFrac`.
fn split(v: u64, precision: u32) -> (u64, String) {
    let scale = 10u64.pow(precision);
    let frac = v % scale;
    if frac == 0 {
        return (v / scale, String::new());
    }
    let digits = format!("{frac:0width$}", width = precision as usize);
    (v / scale, format!(".{}", digits.trim_end_matches('0')))
}

/// Parses Go's duration syntax (`ParseDuration`): a sign, then one or more
/// decimal numbers with a unit (`ns`, `us`, `µs`, `ms`, `s`, `m`, `h`), or `0`.
pub fn parse(text: &str) -> Option<i64> {
    let (negative, mut rest) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if rest == "0" {
        return Some(0);
    }
    if rest.is_empty() {
        return None;
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let int: u128 = if int_len == 0 { 0 } else { rest[..int_len].parse().ok()? };
        rest = &rest[int_len..];
        let mut frac_digits = "";
        if let Some(after) = rest.strip_prefix('.') {
            let len = after.bytes().take_while(u8::is_ascii_digit).count();
            frac_digits = &after[..len];
            rest = &after[len..];
        }
        if int_len == 0 && frac_digits.is_empty() {
            return None;
        }
        let unit_len = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let unit: u128 = match &rest[..unit_len] {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total = total.checked_add(int.checked_mul(unit)?)?;
        if !frac_digits.is_empty() {
            let digits = &frac_digits[..frac_digits.len().min(18)];
            let frac: u128 = digits.parse().ok()?;
            total = total.checked_add(frac * unit / 10u128.pow(digits.len() as u32))?;
        }
    }
    if negative {
        i64::try_from(total).ok().map(|t| -t).or((total == 1u128 << 63).then_some(i64::MIN))
    } else {
        i64::try_from(total).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_as_go_does() {
        // Values and texts of Go's own time package tests.
        let cases = [
            (0, "0s"),
            (1, "1ns"),
            (1_100, "1.1µs"),
            (2_200_000, "2.2ms"),
            (3_300_000_000, "3.3s"),
            (4 * 60_000_000_000 + 5_000_000_000, "4m5s"),
            (4 * 60_000_000_000 + 5_001_000_000, "4m5.001s"),
            (5 * 3_600_000_000_000 + 6 * 60_000_000_000 + 7_001_000_000, "5h6m7.001s"),
            (8 * 60_000_000_000 + 1, "8m0.000000001s"),
            (i64::MAX, "2562047h47m16.854775807s"),
            (i64::MIN, "-2562047h47m16.854775808s"),
            (-1_500_000_000, "-1.5s"),
        ];
        for (nanos, text) in cases {
            assert_eq!(format(nanos), text, "{nanos}");
            assert_eq!(parse(text), Some(nanos), "{text}");
        }
    }

    #[test]
    fn parses_go_syntax() {
        assert_eq!(parse("1h30m"), Some(5_400_000_000_000));
        assert_eq!(parse(".5s"), Some(500_000_000));
        assert_eq!(parse("1.s"), Some(1_000_000_000));
        assert_eq!(parse("100us"), Some(100_000));
        assert_eq!(parse("0"), Some(0));
        for bad in ["", "1", "s", "1x", "-", "1.5", "3000000h"] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }
}
