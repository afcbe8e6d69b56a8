//! The walk: files in parallel through the `ignore` crate's walker, each
//! matched by its language's rules, the results collected into a [`Scan`].

use super::*;

/// What one file produced, for the collector.
enum Outcome {
    Findings(Vec<Finding>),
    /// A file that implements a Redis client's `SET` was read.
    RedisClient,
    Error(String),
}

pub(super) fn relative(root: &Path, path: &Path) -> String {
    let rel = match path.strip_prefix(root) {
        Ok(rel) if !rel.as_os_str().is_empty() => rel,
        _ => path.file_name().map_or(path, Path::new),
    };
    rel.components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}

fn skipped_dir(entry: &DirEntry) -> bool {
    entry.depth() > 0
        && entry.file_type().is_some_and(|t| t.is_dir())
        && entry
            .file_name()
            .to_str()
            .is_some_and(|n| SKIPPED_DIRS.contains(&n))
}

/// Reads a file, or says why it is skipped.
fn read_source(path: &Path) -> std::io::Result<Option<Vec<u8>>> {
    let mut buf = Vec::new();
    File::open(path)?
        .take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut buf)?;
    let too_large = u64::try_from(buf.len()).map_or(true, |n| n > MAX_FILE_BYTES);
    let binary = buf[..buf.len().min(8192)].contains(&0);
    Ok((!too_large && !binary).then_some(buf))
}

/// Walks `root` (a directory or a single file) and matches every source file.
pub(super) fn scan(root: &Path, matchers: &Auditor) -> Scan {
    let started = Instant::now();
    let scanned = AtomicU64::new(0);
    let skipped = AtomicU64::new(0);
    let bytes = AtomicU64::new(0);
    let (tx, rx) = mpsc::channel::<Outcome>();

    let mut builder = WalkBuilder::new(root);
    builder
        .hidden(true)
        .git_ignore(true)
        .git_exclude(true)
        .git_global(true)
        .ignore(true)
        .parents(true)
        .require_git(false)
        .follow_links(false)
        .filter_entry(|e| !skipped_dir(e));
    builder.build_parallel().run(|| {
        let tx = tx.clone();
        let (scanned, skipped, bytes) = (&scanned, &skipped, &bytes);
        Box::new(move |entry| {
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) => {
                    let _ = tx.send(Outcome::Error(e.to_string()));
                    return WalkState::Continue;
                }
            };
            if !entry.file_type().is_some_and(|t| t.is_file()) {
                return WalkState::Continue;
            }
            let Some(language) = entry
                .file_name()
                .to_str()
                .and_then(Language::from_file_name)
            else {
                return WalkState::Continue;
            };
            let path = entry.path();
            let text = match read_source(path) {
                Ok(Some(text)) => text,
                Ok(None) => {
                    skipped.fetch_add(1, Ordering::Relaxed);
                    return WalkState::Continue;
                }
                Err(e) => {
                    let _ = tx.send(Outcome::Error(format!("{}: {e}", path.display())));
                    return WalkState::Continue;
                }
            };
            scanned.fetch_add(1, Ordering::Relaxed);
            bytes.fetch_add(
                u64::try_from(text.len()).unwrap_or(u64::MAX),
                Ordering::Relaxed,
            );
            let FileHits { hits, redis_client } = matchers.scan_text(language, &text);
            if redis_client {
                let _ = tx.send(Outcome::RedisClient);
            }
            if !hits.is_empty() {
                let file = relative(root, path);
                let shown = path.display().to_string();
                let findings = hits
                    .into_iter()
                    .map(|h| h.into_finding(&file, &shown, language))
                    .collect();
                let _ = tx.send(Outcome::Findings(findings));
            }
            WalkState::Continue
        })
    });
    drop(tx);

    let mut findings = Vec::new();
    let mut errors = Vec::new();
    let mut redis_client = false;
    for outcome in rx {
        match outcome {
            Outcome::Findings(f) => findings.extend(f),
            Outcome::RedisClient => redis_client = true,
            Outcome::Error(e) => errors.push(e),
        }
    }
    if redis_client {
        // A Redis client's tree: its tests of `SET … NX` test the client.
        findings.retain(|f| f.kind != REDIS_SET_NX || !is_test_path(&f.file));
    }
    findings.sort_by(|a, b| {
        (&a.file, a.line, a.column, a.category).cmp(&(&b.file, b.line, b.column, b.category))
    });
    errors.sort();
    Scan {
        findings,
        files_scanned: scanned.into_inner(),
        files_skipped: skipped.into_inner(),
        bytes_scanned: bytes.into_inner(),
        errors,
        elapsed: started.elapsed(),
    }
}
