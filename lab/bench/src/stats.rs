//! Order statistics over repetitions.

/// Median, range and mean of a set of values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    pub n: usize,
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub mean: f64,
}

/// The median (mean of the two middle values for an even count).
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len() % 2 == 1 { v[mid] } else { (v[mid - 1] + v[mid]) / 2.0 })
}

/// Summarises the finite values; `None` when there are none.
pub fn summarize(values: &[f64]) -> Option<Summary> {
    let v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    let median = median(&v)?;
    Some(Summary {
        n: v.len(),
        median,
        min: v.iter().copied().fold(f64::INFINITY, f64::min),
        max: v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        mean: v.iter().sum::<f64>() / v.len() as f64,
    })
}

/// The index of the value closest to the median (the "typical" run to plot).
pub fn index_of_median(values: &[f64]) -> Option<usize> {
    let m = median(values)?;
    values
        .iter()
        .enumerate()
        .filter(|(_, v)| v.is_finite())
        .min_by(|a, b| (a.1 - m).abs().total_cmp(&(b.1 - m).abs()))
        .map(|(i, _)| i)
}
