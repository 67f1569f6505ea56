//! Errors and warnings of the configuration loader, and the serde front end that gives every
//! parse error the key path it happened at.

use serde::de::DeserializeOwned;
use std::fmt;

/// Why a configuration file was refused. Every message names the file and, where there is one,
/// the key path (`converter.gardener.projectName`) and what would be valid.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{file}: cannot read {what}: {source}")]
    Read {
        /// The file path.
        file: String,
        /// What the file is and which key or flag named it.
        what: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid JSON or YAML at all.
    #[error("{file}: not valid {format}: {message}{}", location(*.line, *.column))]
    Syntax {
        /// The file name.
        file: String,
        /// `JSON` or `YAML`.
        format: &'static str,
        /// The parser's message.
        message: String,
        /// 1-based line of the error, 0 when unknown.
        line: usize,
        /// 1-based column of the error, 0 when unknown.
        column: usize,
    },
    /// A key is missing, has the wrong type or a value that does not parse.
    #[error("{file}: {path}: {message}{}", location(*.line, *.column))]
    Key {
        /// The file name.
        file: String,
        /// The key path, e.g. `converter.gardener.projectName` or `kim.providers.aws.regions[2]`.
        path: String,
        /// What is wrong and what is expected.
        message: String,
        /// 1-based line of the error, 0 when unknown.
        line: usize,
        /// 1-based column of the error, 0 when unknown.
        column: usize,
    },
    /// The file parsed but breaks one or more rules; all of them are listed.
    #[error("{}", invalid_message(file, problems))]
    Invalid {
        /// The file name.
        file: String,
        /// Every broken rule, in file order where possible.
        problems: Vec<Problem>,
    },
}

impl ConfigError {
    /// The key paths the error is about (empty for read and syntax errors).
    pub fn paths(&self) -> Vec<&str> {
        match self {
            Self::Key { path, .. } => vec![path.as_str()],
            Self::Invalid { problems, .. } => problems.iter().map(|p| p.path.as_str()).collect(),
            Self::Read { .. } | Self::Syntax { .. } => Vec::new(),
        }
    }
}

fn location(line: usize, column: usize) -> String {
    if line == 0 {
        String::new()
    } else {
        format!(" (line {line}, column {column})")
    }
}

fn invalid_message(file: &str, problems: &[Problem]) -> String {
    match problems {
        [one] => format!("{file}: {one}"),
        many => {
            let mut out = format!("{file}: {} problems:", many.len());
            for p in many {
                out.push_str("\n  ");
                out.push_str(&p.to_string());
            }
            out
        }
    }
}

/// One broken rule: where and what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The key path.
    pub path: String,
    /// What is wrong and what would be valid.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Something in a file that does not stop the program but that an operator should see at
/// start (for example a key that upstream KIM knows and this project ignores).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigWarning {
    /// The file name.
    pub file: String,
    /// The key path.
    pub path: String,
    /// What was noticed.
    pub message: String,
}

impl fmt::Display for ConfigWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}: {}", self.file, self.path, self.message)
    }
}

/// Collects the broken rules of one file.
#[derive(Debug)]
pub(crate) struct Checker {
    problems: Vec<Problem>,
}

impl Checker {
    pub(crate) fn new() -> Self {
        Self {
            problems: Vec::new(),
        }
    }

    /// Records a broken rule at `path`.
    pub(crate) fn problem(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.problems.push(Problem {
            path: path.into(),
            message: message.into(),
        });
    }

    /// Records `must not be empty` when `value` is empty or only blanks.
    pub(crate) fn non_empty(&mut self, path: impl Into<String>, value: &str) -> bool {
        if value.trim().is_empty() {
            self.problem(path, "must not be empty");
            return false;
        }
        true
    }

    /// Ok when no rule was broken, otherwise all problems for `file`.
    pub(crate) fn finish(self, file: &str) -> Result<(), ConfigError> {
        if self.problems.is_empty() {
            Ok(())
        } else {
            Err(ConfigError::Invalid {
                file: file.to_owned(),
                problems: self.problems,
            })
        }
    }
}

/// Parses JSON into `T`; every error names the key path. Keys `T` does not know and does not
/// refuse (`deny_unknown_fields`) become warnings: upstream KIM ignores unknown keys, so an
/// upstream file with newer keys must still load.
pub(crate) fn parse_json<T: DeserializeOwned>(
    file: &str,
    text: &str,
    warnings: &mut Vec<ConfigWarning>,
) -> Result<T, ConfigError> {
    let mut ignored = Vec::new();
    let mut record = |p: serde_ignored::Path<'_>| ignored.push(ignored_path(&p));
    let mut de = serde_json::Deserializer::from_str(text);
    let result = {
        let tracked = serde_ignored::Deserializer::new(&mut de, &mut record);
        serde_path_to_error::deserialize(tracked)
    };
    let value: T = result.map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let (line, column) = (inner.line(), inner.column());
        let message = strip_location(&inner.to_string(), line, column);
        if inner.is_syntax() || inner.is_eof() {
            ConfigError::Syntax {
                file: file.to_owned(),
                format: "JSON",
                message,
                line,
                column,
            }
        } else {
            key_error(file, &path, &message, line, column)
        }
    })?;
    de.end().map_err(|e| ConfigError::Syntax {
        file: file.to_owned(),
        format: "JSON",
        message: strip_location(&e.to_string(), e.line(), e.column()),
        line: e.line(),
        column: e.column(),
    })?;
    report_ignored(file, ignored, warnings);
    Ok(value)
}

/// Parses YAML (and so JSON) into `T`, like [`parse_json`]. `path_prefix` is put before every
/// path, for documents embedded in another (`data.config`).
pub(crate) fn parse_yaml<T: DeserializeOwned>(
    file: &str,
    path_prefix: &str,
    text: &str,
    warnings: &mut Vec<ConfigWarning>,
) -> Result<T, ConfigError> {
    let mut ignored = Vec::new();
    let mut record = |p: serde_ignored::Path<'_>| ignored.push(ignored_path(&p));
    let result = {
        let de = serde_yaml_ng::Deserializer::from_str(text);
        let tracked = serde_ignored::Deserializer::new(de, &mut record);
        serde_path_to_error::deserialize(tracked)
    };
    let value: T = result.map_err(|e| {
        let e_path = e.path().to_string();
        let path = join_path(path_prefix, &e_path);
        let inner = e.into_inner();
        let (line, column) = inner
            .location()
            .map(|l| (l.line(), l.column()))
            .unwrap_or((0, 0));
        let message = strip_yaml_path(&strip_location(&inner.to_string(), line, column), &e_path);
        // serde_yaml_ng has no error classification: its scanner and parser errors name what
        // they were doing ("..., while parsing a block mapping"). Such an error may come with
        // the key path reached so far (`eu-central-1`, or `?` after a finished entry), which
        // says less than the line and column.
        if message.contains(", while scanning") || message.contains(", while parsing") {
            ConfigError::Syntax {
                file: file.to_owned(),
                format: "YAML",
                message,
                line,
                column,
            }
        } else {
            key_error(file, &path, &message, line, column)
        }
    })?;
    let ignored = ignored
        .into_iter()
        .map(|p| join_path(path_prefix, &p))
        .collect();
    report_ignored(file, ignored, warnings);
    Ok(value)
}

fn report_ignored(file: &str, ignored: Vec<String>, warnings: &mut Vec<ConfigWarning>) {
    warnings.extend(ignored.into_iter().map(|path| ConfigWarning {
        file: file.to_owned(),
        path,
        message: "unknown key, ignored (check its spelling)".to_owned(),
    }));
}

/// Joins `prefix` and `path`; serde_path_to_error writes the root as `.`.
pub(crate) fn join_path(prefix: &str, path: &str) -> String {
    let path = if path == "." { "" } else { path };
    match (prefix.is_empty(), path.is_empty()) {
        (true, _) => path.to_owned(),
        (false, true) => prefix.to_owned(),
        (false, false) if path.starts_with('[') => format!("{prefix}{path}"),
        (false, false) => format!("{prefix}.{path}"),
    }
}

fn ignored_path(path: &serde_ignored::Path<'_>) -> String {
    match path {
        serde_ignored::Path::Root => String::new(),
        serde_ignored::Path::Seq { parent, index } => format!("{}[{index}]", ignored_path(parent)),
        serde_ignored::Path::Map { parent, key } => join_path(&ignored_path(parent), key),
        serde_ignored::Path::Some { parent }
        | serde_ignored::Path::NewtypeStruct { parent }
        | serde_ignored::Path::NewtypeVariant { parent } => ignored_path(parent),
    }
}

/// serde_yaml_ng starts its messages with its own idea of the path (`eu-central-1: ...`), which
/// is a prefix of ours; drop it so the path is said once.
fn strip_yaml_path(message: &str, path: &str) -> String {
    let mut candidate = path;
    loop {
        if !candidate.is_empty()
            && let Some(rest) = message
                .strip_prefix(candidate)
                .and_then(|r| r.strip_prefix(": "))
        {
            return rest.to_owned();
        }
        match candidate.rfind(['.', '[']) {
            Some(i) => candidate = &candidate[..i],
            None => return message.to_owned(),
        }
    }
}

fn strip_location(message: &str, line: usize, column: usize) -> String {
    let suffix = format!(" at line {line} column {column}");
    message.strip_suffix(&suffix).unwrap_or(message).to_owned()
}

/// Turns a serde message into `path: message` with the key that is missing or unknown in the
/// path and the expectation first.
fn key_error(file: &str, path: &str, message: &str, line: usize, column: usize) -> ConfigError {
    let (path, message) = rephrase(path, message);
    let path = if path.is_empty() {
        "(top level)".to_owned()
    } else {
        path
    };
    ConfigError::Key {
        file: file.to_owned(),
        path,
        message,
        line,
        column,
    }
}

fn rephrase(path: &str, message: &str) -> (String, String) {
    let path = join_path("", path);
    if let Some(field) = backticked_after(message, "missing field ") {
        return (join_path(&path, field), "missing required key".to_owned());
    }
    if let Some(field) = backticked_after(message, "duplicate field ") {
        return (
            join_path(&path, field),
            "key appears more than once".to_owned(),
        );
    }
    if let Some(rest) = message.strip_prefix("unknown field ") {
        // serde_path_to_error has already put the unknown key into the path.
        let field = backticked_after(message, "unknown field ").unwrap_or_default();
        let path = if path == field || path.ends_with(&format!(".{field}")) {
            path
        } else {
            join_path(&path, field)
        };
        let expected = rest
            .split_once(", ")
            .map(|(_, e)| e)
            .unwrap_or("no keys are allowed here");
        return (path, format!("unknown key; {expected}"));
    }
    for prefix in ["invalid type: ", "invalid value: "] {
        if let Some((found, expected)) = message
            .strip_prefix(prefix)
            .and_then(|r| r.rsplit_once(", expected "))
        {
            return (path, format!("expected {expected}, found {found}"));
        }
    }
    (path, message.to_owned())
}

/// The text between the backticks right after `prefix`.
fn backticked_after<'a>(message: &'a str, prefix: &str) -> Option<&'a str> {
    let rest = message.strip_prefix(prefix)?.strip_prefix('`')?;
    rest.split_once('`').map(|(field, _)| field)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn paths_join_with_a_dot_and_indices_attach() {
        assert_eq!(
            join_path("data.config", "eu-central-1"),
            "data.config.eu-central-1"
        );
        assert_eq!(join_path("data.config", "[0].name"), "data.config[0].name");
        assert_eq!(join_path("data.config", "."), "data.config");
        assert_eq!(join_path("", "[0]"), "[0]");
    }

    #[test]
    fn serde_messages_are_rephrased_with_the_key_in_the_path() {
        assert_eq!(
            rephrase("converter.gardener", "missing field `projectName`"),
            (
                "converter.gardener.projectName".to_owned(),
                "missing required key".to_owned()
            )
        );
        assert_eq!(
            rephrase(".", "missing field `converter`"),
            ("converter".to_owned(), "missing required key".to_owned())
        );
        assert_eq!(
            rephrase(
                "converter.provider.aws.enableIMDSv2",
                "invalid type: string \"true\", expected a boolean"
            ),
            (
                "converter.provider.aws.enableIMDSv2".to_owned(),
                "expected a boolean, found string \"true\"".to_owned()
            )
        );
        assert_eq!(
            rephrase(
                "kim.providers.aws",
                "unknown field `regoins`, expected one of `regions`, `zones`"
            ),
            (
                "kim.providers.aws.regoins".to_owned(),
                "unknown key; expected one of `regions`, `zones`".to_owned()
            )
        );
    }

    #[test]
    fn one_problem_reads_as_one_line_and_many_as_a_list() {
        let one = ConfigError::Invalid {
            file: "converter_config.json".into(),
            problems: vec![Problem {
                path: "a.b".into(),
                message: "must not be empty".into(),
            }],
        };
        assert_eq!(
            one.to_string(),
            "converter_config.json: a.b: must not be empty"
        );
        let two = ConfigError::Invalid {
            file: "f".into(),
            problems: vec![
                Problem {
                    path: "a".into(),
                    message: "x".into(),
                },
                Problem {
                    path: "b".into(),
                    message: "y".into(),
                },
            ],
        };
        assert_eq!(two.to_string(), "f: 2 problems:\n  a: x\n  b: y");
    }
}
