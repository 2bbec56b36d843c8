//! Small inline SVG line charts (sparklines) for the status page: a series
//! of values over the last minutes, scaled to its own maximum, the latest
//! value marked. No axes: the figures beside the chart say the scale.

use std::fmt::Write;

use super::esc;

pub(super) const W: f64 = 220.0;
pub(super) const H: f64 = 36.0;
const PAD: f64 = 3.0;
/// The fewest points a chart spreads over.
pub(super) const MIN_SLOTS: usize = 12;

/// The page's styles for the charts (in the page's `<style>`).
pub(super) const CSS: &str = "\
svg.spark{vertical-align:middle;background:#fafbfc;border:1px solid #e3e6ea;border-radius:4px}\
.spark.depth{color:#1f6feb}.spark.rate{color:#2e7d4f}\
.spark polyline{fill:none;stroke:currentColor;stroke-width:1.6;stroke-linejoin:round}\
.spark polygon{fill:currentColor;stroke:none;opacity:.15}\
.spark circle{fill:currentColor;stroke:none}\
.spark text{font:11px system-ui,sans-serif;fill:#888}\
span.figure{display:inline-block;min-width:7em;margin-left:.5em;color:#444;font-size:12px}";

/// A chart of `values` (oldest first) spread over at most `slots` points
/// across the width (at least [`MIN_SLOTS`], so a short history does not
/// stretch into one wide line), right-aligned so the newest value is at the
/// right edge. `class` picks the colours; `title` is the tooltip.
pub(super) fn svg(values: &[f64], slots: usize, class: &str, title: &str) -> String {
    let mut out = format!(
        "<svg class=\"spark {}\" width=\"{W}\" height=\"{H}\" viewBox=\"0 0 {W} {H}\" role=\"img\" aria-label=\"{}\"><title>{}</title>",
        esc(class),
        esc(title),
        esc(title)
    );
    let slots = slots.min(values.len()).max(MIN_SLOTS);
    let values = &values[values.len().saturating_sub(slots)..];
    if values.is_empty() {
        let _ = write!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" dominant-baseline=\"central\">no samples yet</text></svg>",
            W / 2.0,
            H / 2.0
        );
        return out;
    }
    let max = values.iter().copied().fold(0.0, f64::max);
    let step = (W - 2.0 * PAD) / (slots - 1) as f64;
    let first = slots - values.len();
    let point = |i: usize, v: f64| {
        let x = PAD + (first + i) as f64 * step;
        let y = if max > 0.0 {
            H - PAD - (v / max) * (H - 2.0 * PAD)
        } else {
            H - PAD
        };
        (x, y)
    };
    let mut line = String::new();
    for (i, &v) in values.iter().enumerate() {
        let (x, y) = point(i, v);
        let _ = write!(line, "{x:.1},{y:.1} ");
    }
    let (x0, _) = point(0, 0.0);
    let (xn, yn) = point(values.len() - 1, values[values.len() - 1]);
    let _ = write!(
        out,
        "<polygon points=\"{x0:.1},{:.1} {}{xn:.1},{:.1}\"/><polyline points=\"{}\"/><circle cx=\"{xn:.1}\" cy=\"{yn:.1}\" r=\"2.5\"/></svg>",
        H - PAD,
        line,
        H - PAD,
        line.trim_end()
    );
    out
}

/// A rate as the page shows it: `0`, `0.35/s`, `4.2/s`, `120/s`.
pub(super) fn per_second(r: f64) -> String {
    if r <= 0.0 {
        "0/s".into()
    } else if r < 1.0 {
        format!("{r:.2}/s")
    } else if r < 100.0 {
        format!("{r:.1}/s")
    } else {
        format!("{r:.0}/s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_series_is_a_line_ending_at_the_right_edge() {
        let s = svg(&[0.0, 2.0, 1.0], 120, "depth", "queue <depth>");
        assert!(s.starts_with("<svg class=\"spark depth\""), "{s}");
        assert!(s.contains("<title>queue &lt;depth&gt;</title>"), "{s}");
        let points = s.split("<polyline points=\"").nth(1).unwrap();
        let points: Vec<&str> = points.split('"').next().unwrap().split(' ').collect();
        assert_eq!(points.len(), 3, "{s}");
        // The newest point at the right edge, the maximum at the top.
        assert_eq!(
            points[2].split(',').next().unwrap(),
            format!("{:.1}", W - PAD)
        );
        assert_eq!(points[1].split(',').nth(1).unwrap(), format!("{PAD:.1}"));
    }

    #[test]
    fn no_samples_and_flat_zero_series_draw() {
        assert!(svg(&[], 120, "rate", "r").contains("no samples yet"));
        let flat = svg(&[0.0; 5], 120, "rate", "r");
        assert!(flat.contains(&format!(",{:.1}", H - PAD)), "{flat}");
        assert!(!flat.contains("NaN"), "{flat}");
        // More values than slots: only the newest are drawn.
        let many: Vec<f64> = (0..500).map(f64::from).collect();
        let s = svg(&many, 120, "rate", "r");
        assert!(!s.contains("NaN") && s.contains("<polyline"), "{s}");
    }

    #[test]
    fn rates_read_well() {
        assert_eq!(per_second(0.0), "0/s");
        assert_eq!(per_second(0.354), "0.35/s");
        assert_eq!(per_second(4.21), "4.2/s");
        assert_eq!(per_second(1234.0), "1234/s");
    }
}
