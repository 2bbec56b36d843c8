//! Indexed completion mode (`spec.completionMode: Indexed`), as upstream's
//! `indexed_job_utils.go` does it: each pod carries its completion index
//! (annotation and label `batch.kubernetes.io/job-completion-index`, name
//! `<job>-<i>-<random>`, hostname `<job>-<i>`, env `JOB_COMPLETION_INDEX`
//! from the annotation), new pods take the lowest indexes neither completed
//! nor held by a pod, and `status.completedIndexes` keeps the succeeded
//! indexes in upstream's compressed interval form (`"0-2,4"`).

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

/// The annotation and label holding a pod's completion index.
pub const INDEX_KEY: &str = "batch.kubernetes.io/job-completion-index";
/// The env var upstream adds to every container of an Indexed Job's pods.
pub const INDEX_ENV: &str = "JOB_COMPLETION_INDEX";
/// Upstream's `names.MaxGeneratedNameLength`: a generateName's longest prefix.
const MAX_GENERATED_NAME: usize = 58;

/// A set of completion indexes as ascending, disjoint, non-touching runs
/// `[a, b]`: its memory follows the runs, never the number of indexes, so
/// `completions: 1000000000` costs what its `completedIndexes` string does.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Indexes(Vec<(i32, i32)>);

impl Indexes {
    /// How many indexes the set holds.
    pub fn len(&self) -> i64 {
        self.0
            .iter()
            .map(|&(a, b)| i64::from(b) - i64::from(a) + 1)
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The run holding `i`, or where one holding it would go.
    fn find(&self, i: i32) -> Result<usize, usize> {
        self.0.binary_search_by(|&(a, b)| {
            if b < i {
                std::cmp::Ordering::Less
            } else if a > i {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
    }

    pub fn contains(&self, i: i32) -> bool {
        self.find(i).is_ok()
    }

    /// Adds `i`, joining the runs it touches.
    pub fn insert(&mut self, i: i32) {
        let Err(at) = self.find(i) else { return };
        let joins_prev = at > 0 && self.0[at - 1].1.checked_add(1) == Some(i);
        let joins_next = at < self.0.len() && i.checked_add(1) == Some(self.0[at].0);
        match (joins_prev, joins_next) {
            (true, true) => {
                self.0[at - 1].1 = self.0[at].1;
                self.0.remove(at);
            }
            (true, false) => self.0[at - 1].1 = i,
            (false, true) => self.0[at].0 = i,
            (false, false) => self.0.insert(at, (i, i)),
        }
    }

    /// The runs, ascending.
    pub fn runs(&self) -> &[(i32, i32)] {
        &self.0
    }
}

impl FromIterator<i32> for Indexes {
    fn from_iter<T: IntoIterator<Item = i32>>(iter: T) -> Self {
        let mut set = Indexes::default();
        for i in iter {
            set.insert(i);
        }
        set
    }
}

/// `completedIndexes` for `set`: ascending runs, `a-b` for runs of two or
/// more, joined by commas (upstream's `orderedIntervals.String`).
pub fn format(set: &Indexes) -> String {
    set.0
        .iter()
        .map(|&run| interval(run))
        .collect::<Vec<_>>()
        .join(",")
}

fn interval((a, b): (i32, i32)) -> String {
    if a == b {
        a.to_string()
    } else {
        format!("{a}-{b}")
    }
}

/// The indexes `completedIndexes` lists below `completions` (upstream's
/// `parseIndexesFromString`): malformed parts are skipped, intervals are
/// clipped to `[0, completions)`, and overlapping ones joined. The work
/// and memory follow the string's length, not the indexes it names.
pub fn parse(s: &str, completions: i32) -> Indexes {
    let mut runs: Vec<(i32, i32)> = vec![];
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.trim().parse::<i32>(), b.trim().parse::<i32>()),
            None => (part.parse::<i32>(), part.parse::<i32>()),
        };
        let (Ok(a), Ok(b)) = (a, b) else { continue };
        let (a, b) = (a.max(0), b.min(completions.saturating_sub(1)));
        if a <= b {
            runs.push((a, b));
        }
    }
    runs.sort_unstable();
    let mut merged: Vec<(i32, i32)> = Vec::with_capacity(runs.len());
    for (a, b) in runs {
        match merged.last_mut() {
            Some(last) if i64::from(a) <= i64::from(last.1) + 1 => last.1 = last.1.max(b),
            _ => merged.push((a, b)),
        }
    }
    Indexes(merged)
}

/// A pod's completion index: its annotation (upstream's source of truth),
/// else its label; none when absent or not a number.
pub fn index_of(p: &Pod) -> Option<i32> {
    let m = &p.metadata;
    m.annotations
        .as_ref()
        .and_then(|a| a.get(INDEX_KEY))
        .or_else(|| m.labels.as_ref().and_then(|l| l.get(INDEX_KEY)))
        .and_then(|v| v.parse().ok())
}

/// The lowest `n` indexes below `completions` that neither completed nor
/// belong to a pod still holding them (upstream's `firstPendingIndexes`):
/// completed runs are stepped over whole, so the work follows `n`, the
/// runs and the held indexes, never `completions`.
pub fn pending(completions: i32, completed: &Indexes, held: &BTreeSet<i32>, n: usize) -> Vec<i32> {
    let mut out = Vec::with_capacity(n.min(500));
    let mut runs = completed.runs().iter().peekable();
    let mut i = 0;
    while out.len() < n && i < completions {
        while runs.next_if(|&&(_, b)| b < i).is_some() {}
        if let Some(&&(a, b)) = runs.peek()
            && a <= i
        {
            match b.checked_add(1) {
                Some(next) => i = next,
                None => break,
            }
            continue;
        }
        if !held.contains(&i) {
            out.push(i);
        }
        i += 1;
    }
    out
}

/// Upstream's `podGenerateNameWithIndex`: `<job>-<i>-`, the Job's name cut
/// so the prefix stays within a generated name's bound.
pub fn generate_name(job: &str, index: i32) -> String {
    let tail = format!("-{index}-");
    let keep = MAX_GENERATED_NAME.saturating_sub(tail.len());
    let head: String = job.chars().take(keep).collect();
    format!("{head}{tail}")
}

/// Makes `pod` (a Job's pod as JSON) the pod of `index`: the annotation and
/// label, `generateName`, `spec.hostname` (the template's `subdomain` is
/// kept as is), and `JOB_COMPLETION_INDEX` in every container and init
/// container that does not set it already.
pub fn assign(pod: &mut Value, job: &str, index: i32) {
    let i = index.to_string();
    for map in ["annotations", "labels"] {
        let m = &mut pod["metadata"][map];
        if !m.is_object() {
            *m = json!({});
        }
        m[INDEX_KEY] = json!(i);
    }
    pod["metadata"]["generateName"] = json!(generate_name(job, index));
    let spec = &mut pod["spec"];
    if spec.is_object() {
        spec["hostname"] = json!(format!("{job}-{index}"));
    }
    for list in ["containers", "initContainers"] {
        let Some(cs) = spec.get_mut(list).and_then(Value::as_array_mut) else {
            continue;
        };
        for c in cs {
            let env = &mut c["env"];
            if !env.is_array() {
                *env = json!([]);
            }
            let Some(env) = env.as_array_mut() else {
                continue;
            };
            if env.iter().any(|e| e["name"] == INDEX_ENV) {
                continue;
            }
            env.push(json!({"name": INDEX_ENV, "valueFrom": {"fieldRef": {
                "fieldPath": format!("metadata.annotations['{INDEX_KEY}']")}}}));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(v: &[i32]) -> Indexes {
        v.iter().copied().collect()
    }

    fn held(v: &[i32]) -> BTreeSet<i32> {
        v.iter().copied().collect()
    }

    #[test]
    fn completed_indexes_are_written_as_upstream_compresses_them() {
        assert_eq!(format(&set(&[])), "");
        assert_eq!(format(&set(&[0, 1, 2, 4])), "0-2,4");
        assert_eq!(format(&set(&[1, 3, 4, 6, 7, 8])), "1,3-4,6-8");
        assert_eq!(format(&set(&[5])), "5");
    }

    #[test]
    fn completed_indexes_parse_back_clipped_to_the_completions() {
        assert_eq!(parse("0-2,4", 10), set(&[0, 1, 2, 4]));
        assert_eq!(parse("", 10), set(&[]));
        assert_eq!(parse("1,x,3-4,7-", 10), set(&[1, 3, 4]));
        // Bounded: a huge interval costs no more than the Job's completions.
        assert_eq!(parse("0-2147483647", 3), set(&[0, 1, 2]));
        assert_eq!(parse("5-9", 3), set(&[]));
        for s in ["0-2,4", "1,3-4,6-8", "7"] {
            assert_eq!(format(&parse(s, 100)), s);
        }
    }

    #[test]
    fn new_pods_take_the_lowest_free_indexes() {
        assert_eq!(pending(3, &set(&[]), &held(&[]), 2), [0, 1]);
        assert_eq!(pending(5, &set(&[0, 2]), &held(&[1]), 5), [3, 4]);
        assert_eq!(pending(3, &set(&[0, 1]), &held(&[2]), 1), Vec::<i32>::new());
    }

    #[test]
    fn a_billion_completions_cost_what_their_runs_do() {
        let done = parse("0-999999998,5-7", 1_000_000_000);
        assert_eq!(done.runs(), [(0, 999_999_998)]);
        assert_eq!(done.len(), 999_999_999);
        assert_eq!(
            pending(1_000_000_000, &done, &held(&[]), 500),
            [999_999_999]
        );
        let mut gaps = parse("0-9,20-29", 1_000_000_000);
        assert_eq!(
            pending(1_000_000_000, &gaps, &held(&[10, 30]), 4),
            [11, 12, 13, 14]
        );
        gaps.insert(10);
        gaps.insert(15);
        assert_eq!(format(&gaps), "0-10,15,20-29");
        for i in 11..15 {
            gaps.insert(i);
        }
        assert_eq!(format(&gaps), "0-15,20-29");
        assert!(gaps.contains(25) && !gaps.contains(16));
        assert!(pending(i32::MAX, &parse("0-2147483646", i32::MAX), &held(&[]), 3).is_empty());
    }

    #[test]
    fn a_pod_gets_its_index_name_hostname_and_env() {
        let mut pod = json!({"metadata": {"labels": {"a": "b"}},
            "spec": {"containers": [{"name": "c"},
                {"name": "d", "env": [{"name": INDEX_ENV, "value": "mine"}]}]}});
        assign(&mut pod, "work", 2);
        assert_eq!(pod["metadata"]["annotations"][INDEX_KEY], "2");
        assert_eq!(pod["metadata"]["labels"][INDEX_KEY], "2");
        assert_eq!(pod["metadata"]["labels"]["a"], "b");
        assert_eq!(pod["metadata"]["generateName"], "work-2-");
        assert_eq!(pod["spec"]["hostname"], "work-2");
        assert!(pod["spec"].get("subdomain").is_none());
        let env = &pod["spec"]["containers"][0]["env"][0];
        assert_eq!(
            env["valueFrom"]["fieldRef"]["fieldPath"],
            "metadata.annotations['batch.kubernetes.io/job-completion-index']"
        );
        assert_eq!(
            pod["spec"]["containers"][1]["env"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
        let p: Pod = serde_json::from_value(pod).unwrap();
        assert_eq!(index_of(&p), Some(2));
        assert_eq!(generate_name(&"j".repeat(60), 12).len(), MAX_GENERATED_NAME);
    }
}
