//! Words for messages shown to people.

/// `1 feed`, `2 feeds`: a count with its noun in the right number. Nouns
/// whose plural is not `+s` pass it (`count(n, "capture", "captures")`).
pub fn count(n: impl Into<u64>, one: &str, many: &str) -> String {
    let n = n.into();
    format!("{n} {}", if n == 1 { one } else { many })
}

/// `count` for the nouns whose plural adds an `s`.
pub fn plural(n: impl Into<u64>, noun: &str) -> String {
    let n = n.into();
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn one_and_many() {
        assert_eq!(super::plural(1u32, "frame"), "1 frame");
        assert_eq!(super::plural(0u32, "gap"), "0 gaps");
        assert_eq!(super::count(2u32, "entry", "entries"), "2 entries");
    }
}
