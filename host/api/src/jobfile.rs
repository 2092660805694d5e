//! Job files (YAML) read from callers: the one place they are parsed.
//!
//! The web UI's `POST /ui/api/jobs` and `/ui/api/jobs/validate` and the
//! CLI's `paceline job create/update` read a job file with [`parse`]. It
//! refuses, before the YAML parser sees the text, a file over
//! [`MAX_BYTES`] or one nesting deeper than [`MAX_DEPTH`] levels: the YAML
//! parser's time grows with size × nesting depth (200 KB of `[[[[…` took
//! 18-22 s of a server worker), so both are bounded first by a linear scan
//! ([`nesting_depth`]).
//!
//! The server also parses off its async workers and at most
//! [`PARSES_PER_CALLER`] files at once per principal ([`ParseLimiter`]),
//! refusing more with RESOURCE_EXHAUSTED rather than queueing them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use paceline_model::job::JobConfig;
use tonic::Status;

/// Largest job file accepted, in bytes. Real job files are a few KB; this
/// leaves room for long commands and many instance overrides while keeping
/// a worst-case parse (512 KiB of collections [`MAX_DEPTH`] deep) near
/// 0.2 s of one thread (release build; 1 MiB took 0.44 s).
pub const MAX_BYTES: usize = 512 * 1024;

/// Deepest nesting accepted: block mappings and sequences plus flow
/// (`[…]`, `{…}`) collections inside each other. Real job files use under
/// ten.
pub const MAX_DEPTH: usize = 64;

/// Job files one principal may have parsed by the server at the same time.
pub const PARSES_PER_CALLER: usize = 2;

/// Why a job file's text was not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JobFileError {
    /// Over [`MAX_BYTES`].
    #[error("the job file is {size} bytes; at most {limit} bytes are accepted")]
    TooLarge {
        /// The text's size.
        size: usize,
        /// [`MAX_BYTES`].
        limit: usize,
    },
    /// Nested deeper than [`MAX_DEPTH`].
    #[error(
        "the job file nests deeper than {limit} levels (at line {line}, column {column}); at most {limit} levels of mappings, sequences and [ ]/{{ }} collections are accepted"
    )]
    TooDeep {
        /// [`MAX_DEPTH`].
        limit: usize,
        /// Where the limit was passed, 1-based.
        line: usize,
        /// 1-based.
        column: usize,
    },
    /// Not YAML of the job file form.
    #[error("{message}")]
    Yaml {
        /// The parser's message.
        message: String,
        /// 1-based; 0 when unknown.
        line: usize,
        /// 1-based; 0 when unknown.
        column: usize,
    },
}

impl JobFileError {
    /// Where in the text the error is (1-based line and column; 0 when unknown).
    pub fn location(&self) -> (usize, usize) {
        match self {
            JobFileError::TooLarge { .. } => (0, 0),
            JobFileError::TooDeep { line, column, .. } | JobFileError::Yaml { line, column, .. } => (*line, *column),
        }
    }
}

/// Reads a job file's text: size and depth checked first (see the module
/// docs), then YAML in the job file form. The model's `validate` is left
/// to the caller (the server fills in a missing owner first).
pub fn parse(text: &str) -> Result<JobConfig, JobFileError> {
    check_bounds(text)?;
    serde_yaml::from_str(text).map_err(|e| {
        let (line, column) = e.location().map(|l| (l.line(), l.column())).unwrap_or((0, 0));
        JobFileError::Yaml { message: e.to_string(), line, column }
    })
}

/// The size and depth checks of [`parse`] alone.
pub fn check_bounds(text: &str) -> Result<(), JobFileError> {
    if text.len() > MAX_BYTES {
        return Err(JobFileError::TooLarge { size: text.len(), limit: MAX_BYTES });
    }
    match nesting_depth(text, MAX_DEPTH) {
        Ok(_) => Ok(()),
        Err((line, column)) => Err(JobFileError::TooDeep { limit: MAX_DEPTH, line, column }),
    }
}

/// An open flow collection.
#[derive(Clone, Copy)]
struct Frame {
    /// `[…]`: an entry `key: value` in it is a mapping of its own, a level.
    seq: bool,
    /// Such a single-pair mapping is open in the current entry.
    pair: bool,
    /// The deepest level the current entry has reached: a key is known to
    /// be one only at its `:`, and what it holds is then one level deeper.
    entry_max: usize,
}

/// A block scalar's lines being skipped: those more indented than `parent`
/// (or blank) belong to it.
#[derive(Clone, Copy)]
struct BlockScalar {
    parent: i64,
}

/// The deepest nesting in `text` (block collections by indentation, plus
/// flow collections), or the 1-based line and column where it first passes
/// `limit`. One pass, linear in the text.
///
/// It follows the token rules of libyaml's scanner (which serde_yaml
/// uses): a quote, a flow bracket, a comment, a block scalar, a plain
/// scalar going on over lines is recognised where that scanner recognises
/// it, so a bracket inside a quoted string, a comment or a scalar is text.
/// Where it cannot be exact it errs towards counting more (a `[` or `{` in
/// a tag counts as opening, never as closing). It also counts the levels
/// the parser adds around keys: a collection used as a key (`[a]: b`) is
/// inside its mapping, an entry `a: b` of a `[…]` is a mapping of its own.
/// Checked against serde_yaml on random documents
/// (`the_scan_never_counts_less_than_the_parser_builds`).
pub fn nesting_depth(text: &str, limit: usize) -> Result<usize, (usize, usize)> {
    let b = text.as_bytes();
    let n = b.len();
    let blank = |i: usize| i >= n || matches!(b[i], b' ' | b'\t' | b'\r' | b'\n');
    let flow_indicator = |c: u8| matches!(c, b',' | b'[' | b']' | b'{' | b'}');
    // Block levels: libyaml's `indents` with its -1 root, each marked
    // whether it is a sequence (an indentless sequence, `- ` at its
    // mapping's column, is a level libyaml's parser adds).
    let mut indents: Vec<(i64, bool)> = vec![(-1, false)];
    let mut frames: Vec<Frame> = Vec::new();
    // Single-pair mappings open in flow sequences.
    let mut pairs = 0usize;
    let mut deepest = 0usize;
    let mut line = 1usize;
    let mut line_start = 0usize;
    // Column of the first token of a possible block mapping key on this
    // line, and the flow levels that key has reached (see `Frame::entry_max`).
    let mut key_col: Option<i64> = None;
    let mut key_deep = 0usize;
    let mut block_scalar: Option<BlockScalar> = None;
    let mut i = 0usize;
    macro_rules! newline {
        () => {{
            line += 1;
            line_start = i + 1;
            key_col = None;
        }};
    }
    macro_rules! check_depth {
        ($d:expr, $at:expr) => {{
            let d = $d;
            deepest = deepest.max(d);
            if d > limit {
                return Err((line, $at - line_start + 1));
            }
        }};
    }
    // The depth now, noted for the current flow entry and block key.
    macro_rules! check {
        ($at:expr) => {{
            let d = indents.len() - 1 + frames.len() + pairs;
            if let Some(f) = frames.last_mut() {
                f.entry_max = f.entry_max.max(d);
            }
            if key_col.is_some() {
                key_deep = key_deep.max(frames.len() + pairs);
            }
            check_depth!(d, $at);
        }};
    }
    macro_rules! key_starts {
        ($col:expr) => {{
            if frames.is_empty() && key_col.is_none() {
                key_col = Some($col);
                key_deep = 0;
            }
        }};
    }
    while i < n {
        // At the start of a line: a block scalar's content is skipped whole.
        if i == line_start
            && let Some(bs) = block_scalar
        {
            let indent = b[i..].iter().take_while(|&&c| c == b' ').count();
            let rest = i + indent;
            let empty = rest >= n || b[rest] == b'\n' || (b[rest] == b'\r');
            if empty || indent as i64 > bs.parent {
                match b[i..].iter().position(|&c| c == b'\n') {
                    Some(p) => {
                        i += p;
                        newline!();
                        i += 1;
                        continue;
                    }
                    None => break,
                }
            }
            block_scalar = None;
        }
        let c = b[i];
        // Between tokens.
        if c == b'\n' {
            newline!();
            i += 1;
            continue;
        }
        if matches!(c, b' ' | b'\t' | b'\r') {
            i += 1;
            continue;
        }
        if c == b'#' {
            // Only reached where a token may start, so after a blank: a comment.
            while i < n && b[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        let col = (i - line_start) as i64;
        if frames.is_empty() {
            // libyaml unrolls block levels at every token in block context.
            while indents.last().is_some_and(|&(t, _)| t > col) {
                indents.pop();
            }
            if col == 0 && i + 3 <= n && (&b[i..i + 3] == b"---" || &b[i..i + 3] == b"...") && blank(i + 3) {
                indents.truncate(1);
                i += 3;
                continue;
            }
            if col == 0 && c == b'%' {
                while i < n && b[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
        }
        match c {
            b'[' | b'{' => {
                key_starts!(col);
                frames.push(Frame { seq: c == b'[', pair: false, entry_max: 0 });
                check!(i);
                i += 1;
            }
            b']' | b'}' => {
                if let Some(f) = frames.pop() {
                    pairs -= usize::from(f.pair);
                    if let Some(up) = frames.last_mut() {
                        up.entry_max = up.entry_max.max(f.entry_max);
                    }
                }
                i += 1;
            }
            b',' => {
                // The next entry starts at the collection's own level.
                if let Some(f) = frames.last_mut()
                    && f.pair
                {
                    f.pair = false;
                    pairs -= 1;
                }
                let level = indents.len() - 1 + frames.len() + pairs;
                if let Some(f) = frames.last_mut() {
                    f.entry_max = level;
                }
                i += 1;
            }
            b'?' | b':' if !frames.is_empty() => {
                // `[a: b]`, `[? a]`: the entry is a mapping of one pair.
                if let Some(f) = frames.last_mut()
                    && f.seq
                    && !f.pair
                {
                    f.pair = true;
                    f.entry_max += 1;
                    let d = f.entry_max;
                    pairs += 1;
                    if key_col.is_some() {
                        key_deep = key_deep.max(d.saturating_sub(indents.len() - 1));
                    }
                    check_depth!(d, i);
                }
                i += 1;
            }
            b'-' | b'?' | b':' if blank(i + 1) => {
                if frames.is_empty() {
                    let at = match c {
                        b':' => key_col.unwrap_or(col),
                        _ => col,
                    };
                    let seq = c == b'-';
                    if !seq {
                        // A key at an indentless sequence's column ends it.
                        while indents.len() > 1 && indents.last().is_some_and(|&(t, s)| s && t == at) {
                            indents.pop();
                        }
                    }
                    let top = indents.last().copied().unwrap_or((-1, false));
                    if at > top.0 || (seq && at == top.0 && !top.1) {
                        indents.push((at, seq));
                        // A key's own collections are inside the new mapping.
                        let d = indents.len() - 1 + if seq { 0 } else { key_deep };
                        check_depth!(d, i);
                    }
                    key_col = None;
                }
                i += 1;
            }
            b'|' | b'>' if frames.is_empty() => {
                // The header; the content is the following lines more
                // indented than the enclosing block level.
                let parent = indents.last().map_or(-1, |&(t, _)| t);
                while i < n && b[i] != b'\n' {
                    i += 1;
                }
                block_scalar = Some(BlockScalar { parent });
            }
            b'\'' | b'"' => {
                key_starts!(col);
                i += 1;
                while i < n {
                    match b[i] {
                        b'\\' if c == b'"' => {
                            i += 1;
                            if i < n && b[i] == b'\n' {
                                newline!();
                            }
                        }
                        b'\'' if c == b'\'' && i + 1 < n && b[i + 1] == b'\'' => i += 1,
                        q if q == c => break,
                        b'\n' => newline!(),
                        _ => {}
                    }
                    i += 1;
                }
                i += 1;
            }
            b'!' | b'&' | b'*' => {
                key_starts!(col);
                // A tag, anchor or alias runs to a blank (a tag URI may
                // hold brackets: opening ones count, closing ones do not).
                let ends = |d: u8| c != b'!' && flow_indicator(d);
                while !blank(i) && !ends(b[i]) {
                    if c == b'!' && matches!(b[i], b'[' | b'{') {
                        frames.push(Frame { seq: false, pair: false, entry_max: 0 });
                        check!(i);
                    }
                    i += 1;
                }
            }
            _ => {
                // A plain scalar: it ends at `: `, at ` #`, and in a flow
                // collection at a flow indicator. As in libyaml it goes on
                // over line breaks onto lines indented past the block level
                // (any line, in a flow collection), so a quote or bracket
                // starting such a line is text, not a token.
                key_starts!(col);
                let in_flow = !frames.is_empty();
                let top = indents.last().map_or(-1, |&(t, _)| t);
                'scalar: loop {
                    while i < n && b[i] != b'\n' {
                        let d = b[i];
                        if d == b':' && (blank(i + 1) || (in_flow && i + 1 < n && flow_indicator(b[i + 1]))) {
                            break 'scalar;
                        }
                        if in_flow && flow_indicator(d) {
                            break 'scalar;
                        }
                        if d == b'#' && i > 0 && matches!(b[i - 1], b' ' | b'\t') {
                            break 'scalar;
                        }
                        i += 1;
                    }
                    // At a line break: the next line with content continues
                    // the scalar unless it is less indented, a comment or a
                    // document marker.
                    let (mut j, mut breaks, mut last_break) = (i, 0usize, i);
                    while j < n && matches!(b[j], b' ' | b'\t' | b'\r' | b'\n') {
                        if b[j] == b'\n' {
                            breaks += 1;
                            last_break = j;
                        }
                        j += 1;
                    }
                    if j >= n || breaks == 0 {
                        break;
                    }
                    let next_col = (j - last_break - 1) as i64;
                    let marker = next_col == 0
                        && j + 3 <= n
                        && (&b[j..j + 3] == b"---" || &b[j..j + 3] == b"...")
                        && blank(j + 3);
                    if b[j] == b'#' || marker || (!in_flow && next_col <= top) {
                        break;
                    }
                    line += breaks;
                    line_start = last_break + 1;
                    key_col = None;
                    i = j;
                }
            }
        }
    }
    Ok(deepest)
}

/// At most [`PARSES_PER_CALLER`] job files parsed at once per principal
/// name; more are refused at once, not queued. One per API server (held
/// by the job service); entries live only while a parse runs.
#[derive(Debug)]
pub struct ParseLimiter {
    per_caller: usize,
    active: Arc<Mutex<HashMap<String, usize>>>,
}

impl Default for ParseLimiter {
    fn default() -> Self {
        ParseLimiter::new(PARSES_PER_CALLER)
    }
}

/// One parse admitted by [`ParseLimiter::admit`]; dropping it frees the slot.
#[derive(Debug)]
pub struct ParseSlot {
    who: String,
    active: Arc<Mutex<HashMap<String, usize>>>,
}

impl Drop for ParseSlot {
    fn drop(&mut self) {
        let mut active = self.active.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = active.get_mut(&self.who) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                active.remove(&self.who);
            }
        }
    }
}

impl ParseLimiter {
    /// `per_caller` parses at once for each principal (at least one).
    pub fn new(per_caller: usize) -> ParseLimiter {
        ParseLimiter { per_caller: per_caller.max(1), active: Arc::default() }
    }

    /// A slot for one parse by `who`, or RESOURCE_EXHAUSTED when `who`
    /// already has `per_caller` running.
    pub fn admit(&self, who: &str) -> Result<ParseSlot, Status> {
        let mut active = self.active.lock().unwrap_or_else(|p| p.into_inner());
        let count = active.entry(who.to_string()).or_insert(0);
        if *count >= self.per_caller {
            return Err(Status::resource_exhausted(format!(
                "{who} already has {} job files being parsed (at most {} at once): wait for them and try again",
                *count, self.per_caller
            )));
        }
        *count += 1;
        Ok(ParseSlot { who: who.to_string(), active: self.active.clone() })
    }

    /// [`parse`] on a blocking thread (the parse is CPU work the async
    /// workers must not do), within `who`'s share.
    pub async fn parse(&self, who: &str, text: String) -> Result<Result<JobConfig, JobFileError>, Status> {
        let slot = self.admit(who)?;
        let parsed = tokio::task::spawn_blocking(move || {
            let _slot = slot;
            parse(&text)
        })
        .await
        .map_err(|e| Status::internal(format!("parsing the job file: {e}")))?;
        Ok(parsed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn depth(text: &str) -> usize {
        nesting_depth(text, usize::MAX).unwrap_or_else(|at| panic!("{text:?}: refused at {at:?}"))
    }

    #[test]
    fn depth_of_ordinary_yaml() {
        assert_eq!(depth(""), 0);
        assert_eq!(depth("name: x\n"), 1);
        assert_eq!(depth("a:\n  b:\n    c: 1\n"), 3);
        assert_eq!(depth("a:\n- x\n- y\n"), 2);
        assert_eq!(depth("- - - x\n"), 3);
        assert_eq!(depth("a: [1, [2, {b: 3}]]\n"), 4);
        // Brackets in quotes, comments, block scalars and plain scalars are text.
        assert_eq!(depth("a: \"[[[[\" # [[[[\nb: '{{{{'\n"), 1);
        assert_eq!(depth("command: |\n  if [ -f x ]; then echo [[[[; fi\n  {{{\nnext: 1\n"), 1);
        assert_eq!(depth("command: echo [[[[ {{{{\n"), 1);
        assert_eq!(depth("- a: |\n    [[[[\n  b: [x]\n"), 3);
        assert_eq!(depth("a: 'it''s [' \nb: \"\\\" [[\"\n"), 1);
    }

    #[test]
    fn closing_brackets_in_quotes_do_not_hide_depth() {
        let piece = "[ ']]]]', \"]]]]\", ";
        let text = format!("a: {}", piece.repeat(100));
        assert_eq!(nesting_depth(&text, 64).expect_err("too deep").0, 1);
        // A bracket in a tag opens; one closing it in a tag does not count.
        assert!(nesting_depth(&format!("a: {}", "!x] [".repeat(100)), 64).is_err());
    }

    #[test]
    fn a_plain_scalar_going_on_over_lines_hides_no_depth() {
        // libyaml reads the `"` and `'` starting these lines as part of the
        // plain scalar above them: taking them for quotes would skip the rest.
        let deep = "[".repeat(100);
        for text in [
            format!("a: b\n  \"\nc: {deep}"),
            format!("a: b\n  '\nc: {deep}"),
            format!("a: [b\n\" , {deep}"),
            format!("- b\n  \"\n- {deep}"),
        ] {
            assert!(nesting_depth(&text, 64).is_err(), "{text:?}");
        }
        assert_eq!(depth("a: one\n  two [ three\n  \"four\nb: 1\n"), 1);
    }

    #[test]
    fn keys_that_are_collections_and_pairs_in_sequences_count() {
        assert_eq!(depth("{}: b\n"), 2);
        assert_eq!(depth("[a: b]\n"), 2);
        assert_eq!(depth("[[a]: b]\n"), 3);
        assert_eq!(depth("[? a]: b\n"), 3);
        assert_eq!(depth("[a: b, c]\n"), 2);
    }

    /// Random documents of YAML's significant characters: for every one
    /// serde_yaml reads, the scan counts at least the depth it built.
    #[test]
    fn the_scan_never_counts_less_than_the_parser_builds() {
        fn built(v: &serde_yaml::Value) -> usize {
            match v {
                serde_yaml::Value::Sequence(s) => 1 + s.iter().map(built).max().unwrap_or(0),
                serde_yaml::Value::Mapping(m) => 1 + m.iter().map(|(k, v)| built(k).max(built(v))).max().unwrap_or(0),
                serde_yaml::Value::Tagged(t) => built(&t.value),
                _ => 0,
            }
        }
        let pieces = [
            "[", "]", "{", "}", ", ", ",", ": ", ":", " ", "\n", "\n  ", "\n    ", "- ", "-", "'", "\"", "# c", " #",
            "|", "|-\n", ">", "a", "b", "!t ", "&x ", "*x", "\\", "? ", "''", "x'y", "---\n", "\t", "\n\"", "\n '",
            "\n  [", "\n- ", "a: ", "- a: ",
        ];
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut read = 0;
        for _ in 0..30_000 {
            let text: String = (0..next() % 30).map(|_| pieces[(next() % pieces.len() as u64) as usize]).collect();
            let Ok(value) = serde_yaml::from_str::<serde_yaml::Value>(&text) else { continue };
            read += 1;
            assert!(depth(&text) >= built(&value), "{text:?}: scanned {} < built {}", depth(&text), built(&value));
        }
        assert!(read > 3_000, "only {read} documents were YAML");
    }

    #[test]
    fn a_deeply_nested_file_is_refused_naming_the_limit() {
        for text in ["[".repeat(200_000), format!("name: {}", "[".repeat(200_000)), "{a: ".repeat(50_000)] {
            let e = parse(&text).expect_err("refused");
            let message = e.to_string();
            assert!(matches!(e, JobFileError::TooDeep { limit: 64, line: 1, .. }), "{message}");
            assert!(message.contains("nests deeper than 64 levels"), "{message}");
        }
        // Block nesting counts too.
        let mut text = String::new();
        for level in 0..80 {
            text.push_str(&format!("{}k{level}:\n", " ".repeat(level)));
        }
        let e = parse(&text).expect_err("refused");
        assert!(matches!(e, JobFileError::TooDeep { line: 65, .. }), "{e}");
        assert!(parse(&"- ".repeat(1000)).expect_err("refused").to_string().contains("deeper than 64"));
    }

    #[test]
    fn a_large_file_is_refused_naming_the_limit() {
        let text = format!("name: x\n# {}\n", "x".repeat(MAX_BYTES));
        let e = parse(&text).expect_err("refused");
        assert_eq!(e, JobFileError::TooLarge { size: text.len(), limit: MAX_BYTES });
        assert!(e.to_string().contains(&format!("at most {MAX_BYTES} bytes")), "{e}");
    }

    #[test]
    fn ordinary_job_files_parse() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
        let mut read = 0;
        for entry in std::fs::read_dir(&dir).expect("examples") {
            let path = entry.expect("entry").path();
            let Ok(text) = std::fs::read_to_string(&path) else { continue };
            if path.extension().is_none_or(|e| e != "yaml") {
                continue;
            }
            // Every example passes the bounds; the job files also parse.
            check_bounds(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            if serde_yaml::from_str::<JobConfig>(&text).is_ok() {
                assert!(parse(&text).is_ok(), "{}", path.display());
                read += 1;
            }
        }
        assert!(read >= 1, "no example job file found in {}", dir.display());
        let hello = std::fs::read_to_string(dir.join("hello.yaml")).expect("hello.yaml");
        assert!(!parse(&hello).expect("parses").name.is_empty());
        // A syntax error keeps its place.
        let e = parse("name: x\nlabels: [a\n").expect_err("bad yaml");
        assert!(matches!(e, JobFileError::Yaml { line: 2.., .. }), "{e:?}");
    }

    #[test]
    fn a_callers_extra_concurrent_parse_is_refused_not_another_callers() {
        let limiter = ParseLimiter::new(2);
        let a1 = limiter.admit("alice").expect("first");
        let _a2 = limiter.admit("alice").expect("second");
        let refused = limiter.admit("alice").expect_err("third");
        assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
        assert!(refused.message().contains("at most 2 at once"), "{}", refused.message());
        let _b = limiter.admit("bob").expect("another caller is not held up");
        drop(a1);
        let _a3 = limiter.admit("alice").expect("a finished parse frees its slot");
    }

    #[tokio::test]
    async fn the_limiter_parses_off_the_async_workers() {
        let limiter = ParseLimiter::default();
        let config = limiter.parse("alice", "name: x\n".into()).await.expect("admitted").expect("parses");
        assert_eq!(config.name, "x");
        let e = limiter.parse("alice", "[".repeat(1000)).await.expect("admitted").expect_err("too deep");
        assert!(matches!(e, JobFileError::TooDeep { .. }));
        assert!(limiter.active.lock().expect("lock").is_empty(), "slots are given back");
    }
}
