//! Pass conditions of Prometheus gates: `< 0.05`, `>= 0.99`, `== 0`.

use std::fmt;
use std::str::FromStr;

/// Comparison operator of a threshold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `==`
    Eq,
    /// `!=`
    Ne,
}

/// A parsed threshold: the query's value passes when `value <op> bound`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Threshold {
    /// The operator.
    pub op: Op,
    /// The number compared against.
    pub bound: f64,
}

/// A threshold that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ThresholdError {
    /// No operator at the start.
    #[error("threshold {0:?} must start with <, <=, >, >=, == or !=")]
    NoOperator(String),
    /// The operand is not a finite number.
    #[error("threshold {0:?} must compare with a finite number")]
    BadNumber(String),
}

impl FromStr for Threshold {
    type Err = ThresholdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        // Two-character operators first, so "<=" is not read as "<" then "=".
        let (op, rest) = [
            ("<=", Op::Le),
            (">=", Op::Ge),
            ("==", Op::Eq),
            ("!=", Op::Ne),
            ("<", Op::Lt),
            (">", Op::Gt),
        ]
        .iter()
        .find_map(|(p, op)| t.strip_prefix(p).map(|rest| (*op, rest)))
        .ok_or_else(|| ThresholdError::NoOperator(s.to_string()))?;
        let bound: f64 = rest
            .trim()
            .parse()
            .map_err(|_| ThresholdError::BadNumber(s.to_string()))?;
        if !bound.is_finite() {
            return Err(ThresholdError::BadNumber(s.to_string()));
        }
        Ok(Threshold { op, bound })
    }
}

impl Threshold {
    /// Whether a (finite) value passes. NaN never passes; callers treat it as
    /// inconclusive before asking.
    pub fn passes(&self, value: f64) -> bool {
        match self.op {
            Op::Lt => value < self.bound,
            Op::Le => value <= self.bound,
            Op::Gt => value > self.bound,
            Op::Ge => value >= self.bound,
            // Thresholds compare exactly, as PromQL's `==` does.
            #[allow(clippy::float_cmp)]
            Op::Eq => value == self.bound,
            #[allow(clippy::float_cmp)]
            Op::Ne => value != self.bound && !value.is_nan(),
        }
    }
}

impl fmt::Display for Threshold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = match self.op {
            Op::Lt => "<",
            Op::Le => "<=",
            Op::Gt => ">",
            Op::Ge => ">=",
            Op::Eq => "==",
            Op::Ne => "!=",
        };
        write!(f, "{op} {}", self.bound)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_operator() {
        let cases = [
            ("< 0.05", Op::Lt, 0.05),
            ("<=1", Op::Le, 1.0),
            (" > -2 ", Op::Gt, -2.0),
            (">= 0.99", Op::Ge, 0.99),
            ("== 0", Op::Eq, 0.0),
            ("!= 3e2", Op::Ne, 300.0),
        ];
        for (s, op, bound) in cases {
            assert_eq!(s.parse::<Threshold>(), Ok(Threshold { op, bound }), "{s}");
        }
    }

    #[test]
    fn refuses_bad_thresholds() {
        assert!(matches!(
            "0.05".parse::<Threshold>(),
            Err(ThresholdError::NoOperator(_))
        ));
        assert!(matches!(
            "< lots".parse::<Threshold>(),
            Err(ThresholdError::BadNumber(_))
        ));
        assert!(matches!(
            "< inf".parse::<Threshold>(),
            Err(ThresholdError::BadNumber(_))
        ));
        assert!(matches!(
            "<".parse::<Threshold>(),
            Err(ThresholdError::BadNumber(_))
        ));
    }

    #[test]
    fn compares_values() {
        let t: Threshold = "< 0.05".parse().unwrap();
        assert!(t.passes(0.01));
        assert!(!t.passes(0.05));
        assert!(!t.passes(f64::NAN));
        let t: Threshold = ">= 0.99".parse().unwrap();
        assert!(t.passes(0.99));
        assert!(!t.passes(0.5));
        assert!(!"!= 0".parse::<Threshold>().unwrap().passes(f64::NAN));
    }
}
