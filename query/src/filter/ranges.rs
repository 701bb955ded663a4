//! Sets of 64-bit integers as sorted, disjoint, non-adjacent inclusive intervals: what a
//! boolean combination of comparisons of one integer field admits, written as one Postgres
//! `int8multirange` literal. The compiler turns large such combinations into one `<@` test
//! ([`super::compile`]), which the database evaluates with a binary search per row instead of
//! one comparison per condition.

use std::fmt::Write as _;

use super::ast::CompareOp;

/// A set of `i64` values.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct RangeSet {
    /// Inclusive `(low, high)` bounds, sorted, disjoint and not adjacent.
    intervals: Vec<(i64, i64)>,
}

impl RangeSet {
    /// Every value.
    fn all() -> Self {
        Self {
            intervals: vec![(i64::MIN, i64::MAX)],
        }
    }

    /// The values `x` for which `x op value` holds.
    pub(crate) fn comparison(op: CompareOp, value: i64) -> Self {
        let interval = |low: Option<i64>, high: Option<i64>| match (low, high) {
            (Some(low), Some(high)) if low <= high => Self {
                intervals: vec![(low, high)],
            },
            _ => Self::default(),
        };
        match op {
            CompareOp::Eq => interval(Some(value), Some(value)),
            CompareOp::Neq => interval(Some(value), Some(value)).complement(),
            CompareOp::Gt => interval(value.checked_add(1), Some(i64::MAX)),
            CompareOp::Ge => interval(Some(value), Some(i64::MAX)),
            CompareOp::Lt => interval(Some(i64::MIN), value.checked_sub(1)),
            CompareOp::Le => interval(Some(i64::MIN), Some(value)),
        }
    }

    /// The values of a list.
    pub(crate) fn values(values: impl IntoIterator<Item = i64>) -> Self {
        Self::union_of(values.into_iter().map(|value| (value, value)).collect())
    }

    /// The number of intervals: the size of the literal, and the work of combining the set.
    pub(crate) fn len(&self) -> usize {
        self.intervals.len()
    }

    /// The union of intervals given in any order.
    fn union_of(mut intervals: Vec<(i64, i64)>) -> Self {
        intervals.sort_unstable();
        let mut merged: Vec<(i64, i64)> = Vec::with_capacity(intervals.len());
        for (low, high) in intervals {
            match merged.last_mut() {
                // Overlapping or adjacent (`i128`: `high + 1` may pass `i64::MAX`).
                Some(last) if i128::from(low) <= i128::from(last.1) + 1 => {
                    last.1 = last.1.max(high);
                }
                _ => merged.push((low, high)),
            }
        }
        Self { intervals: merged }
    }

    /// The union of sets.
    pub(crate) fn union(sets: Vec<Self>) -> Self {
        Self::union_of(sets.into_iter().flat_map(|set| set.intervals).collect())
    }

    /// The intersection of sets (every value when there are none).
    pub(crate) fn intersection(sets: Vec<Self>) -> Self {
        sets.into_iter()
            .reduce(|a, b| a.intersect(&b))
            .unwrap_or_else(Self::all)
    }

    fn intersect(&self, other: &Self) -> Self {
        let (mut i, mut j) = (0, 0);
        let mut intervals = Vec::new();
        while let (Some(&(a_low, a_high)), Some(&(b_low, b_high))) =
            (self.intervals.get(i), other.intervals.get(j))
        {
            let (low, high) = (a_low.max(b_low), a_high.min(b_high));
            if low <= high {
                intervals.push((low, high));
            }
            if a_high < b_high {
                i += 1;
            } else {
                j += 1;
            }
        }
        Self { intervals }
    }

    /// The values not in the set.
    pub(crate) fn complement(&self) -> Self {
        let mut intervals = Vec::with_capacity(self.intervals.len() + 1);
        // The first value not yet covered; `None` once past `i64::MAX`.
        let mut next = Some(i64::MIN);
        for &(low, high) in &self.intervals {
            if let Some(start) = next
                && start < low
            {
                intervals.push((start, low - 1));
            }
            next = high.checked_add(1);
        }
        if let Some(start) = next {
            intervals.push((start, i64::MAX));
        }
        Self { intervals }
    }

    /// The set as an `int8multirange` literal: `{[1,5],[9,)}`; the extremes of `i64` are
    /// written as unbounded ends, since the database's canonical form (`[a,b+1)`) could not
    /// hold `i64::MAX + 1`.
    pub(crate) fn multirange_literal(&self) -> String {
        let mut literal = String::from("{");
        for (position, &(low, high)) in self.intervals.iter().enumerate() {
            if position > 0 {
                literal.push(',');
            }
            // Writing to a String cannot fail.
            let _ = match (low == i64::MIN, high == i64::MAX) {
                (true, true) => write!(literal, "(,)"),
                (true, false) => write!(literal, "(,{high}]"),
                (false, true) => write!(literal, "[{low},)"),
                (false, false) => write!(literal, "[{low},{high}]"),
            };
        }
        literal.push('}');
        literal
    }

    #[cfg(test)]
    fn contains(&self, value: i64) -> bool {
        self.intervals
            .iter()
            .any(|&(low, high)| low <= value && value <= high)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROBES: [i64; 9] = [
        i64::MIN,
        i64::MIN + 1,
        -6,
        -5,
        0,
        5,
        6,
        i64::MAX - 1,
        i64::MAX,
    ];

    fn holds(op: CompareOp, x: i64, value: i64) -> bool {
        match op {
            CompareOp::Eq => x == value,
            CompareOp::Neq => x != value,
            CompareOp::Gt => x > value,
            CompareOp::Ge => x >= value,
            CompareOp::Lt => x < value,
            CompareOp::Le => x <= value,
        }
    }

    #[test]
    fn comparisons_admit_what_they_compare() {
        for op in CompareOp::ALL {
            for value in PROBES {
                let set = RangeSet::comparison(op, value);
                for x in PROBES {
                    assert_eq!(set.contains(x), holds(op, x, value), "{op:?} {value} {x}");
                }
            }
        }
    }

    #[test]
    fn unions_intersections_and_complements() {
        let lt0 = RangeSet::comparison(CompareOp::Lt, 0);
        let gt5 = RangeSet::comparison(CompareOp::Gt, 5);
        let either = RangeSet::union(vec![lt0.clone(), gt5.clone()]);
        assert_eq!(either.multirange_literal(), "{(,-1],[6,)}");
        assert_eq!(either.complement().multirange_literal(), "{[0,5]}");
        assert_eq!(
            RangeSet::intersection(vec![either.clone(), RangeSet::values([-3, 2, 9])])
                .multirange_literal(),
            "{[-3,-3],[9,9]}"
        );
        // Adjacent intervals merge.
        assert_eq!(
            RangeSet::values([1, 2, 3, 7]).multirange_literal(),
            "{[1,3],[7,7]}"
        );
        assert_eq!(RangeSet::intersection(vec![]).multirange_literal(), "{(,)}");
        assert_eq!(RangeSet::union(vec![]).multirange_literal(), "{}");
        assert_eq!(RangeSet::all().complement().multirange_literal(), "{}");
        assert_eq!(
            RangeSet::comparison(CompareOp::Neq, i64::MAX).multirange_literal(),
            format!("{{(,{}]}}", i64::MAX - 1)
        );
        assert_eq!(
            RangeSet::comparison(CompareOp::Gt, i64::MAX).multirange_literal(),
            "{}"
        );
    }
}
