//! What the benches share: reading a process's figures from /proc and writing their block of
//! figures into docs/benchmarks.md.

use std::path::Path;

/// A `kB` field of /proc/<pid>/status (`key` with its colon, e.g. `"VmRSS:"`), in KiB.
pub fn proc_status_kib(pid: u32, key: &str) -> Option<u64> {
    status_kib(
        &std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?,
        key,
    )
}

/// A `kB` field of the text of a /proc/<pid>/status, in KiB.
pub fn status_kib(status: &str, key: &str) -> Option<u64> {
    status
        .lines()
        .find(|l| l.starts_with(key))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The 1, 5 and 15 minute load averages, space-separated (empty when unreadable).
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// Replaces the block between the markers `<!-- {marker}:start ... -->` and
/// `<!-- {marker}:end -->` in the Markdown file `path` with `block`; without the markers the
/// block goes right below `heading`, or with the heading at the end of the file. `made_by`
/// names the command in the start marker.
pub fn write_doc_block(
    path: &Path,
    marker: &str,
    made_by: &str,
    heading: &str,
    block: &str,
) -> std::io::Result<()> {
    let text = std::fs::read_to_string(path)?;
    std::fs::write(path, with_block(&text, marker, made_by, heading, block))
}

fn with_block(text: &str, marker: &str, made_by: &str, heading: &str, block: &str) -> String {
    let start = format!("<!-- {marker}:start");
    let end_marker = format!("<!-- {marker}:end -->");
    let marked = format!(
        "{start} (written by {made_by}; edit the bench, not this block) -->\n{block}{end_marker}\n"
    );
    match (text.find(&start), text.find(&end_marker)) {
        (Some(a), Some(b)) if b > a => {
            let mut end = b + end_marker.len();
            if text[end..].starts_with('\n') {
                end += 1;
            }
            format!("{}{marked}{}", &text[..a], &text[end..])
        }
        _ => match text.find(heading) {
            // The section exists (prose written by hand): the figures go right below the heading.
            Some(h) => {
                let at = h + heading.len();
                format!("{}\n\n{marked}{}", &text[..at], &text[at..])
            }
            None => format!("{}\n\n{heading}\n\n{marked}", text.trim_end()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_block_replaces_the_old_one_or_goes_below_its_heading() {
        let made = |text: &str| with_block(text, "b", "`make b`", "## B", "new\n");
        let block = "<!-- b:start (written by `make b`; edit the bench, not this block) -->\nnew\n<!-- b:end -->\n";
        assert_eq!(
            made("## B\n<!-- b:start x -->\nold\n<!-- b:end -->\nprose\n"),
            format!("## B\n{block}prose\n")
        );
        assert_eq!(made("## B\nprose\n"), format!("## B\n\n{block}\nprose\n"));
        assert_eq!(made("# Doc\n\n"), format!("# Doc\n\n## B\n\n{block}"));
    }

    #[test]
    fn status_fields_are_read_in_kib() {
        let rss = proc_status_kib(std::process::id(), "VmRSS:").unwrap();
        assert!(rss > 0, "{rss}");
        assert_eq!(proc_status_kib(std::process::id(), "NoSuchField:"), None);
    }
}
