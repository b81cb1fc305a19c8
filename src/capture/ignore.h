/* ignore: the operator's list of paths the capture does not report one by
 * one (editors' swap and backup files, caches). Sans-I/O: a parser and a
 * matcher, nothing read from the workspace (the list is the operator's,
 * never the learner's: a .gitignore in the workspace means nothing here).
 *
 * The list: patterns separated by commas (`\,` is a comma inside a
 * pattern; any other `\x` is fnmatch's escape, kept as is). Each pattern is
 * an fnmatch(3) glob (*, ?, [...]; `*` never crosses a `/`):
 *   name        no `/`: matches a file or directory of that name at any
 *               depth (`*.swp`, `*~`, `.#*`, `*.pyc`)
 *   name/       a trailing `/`: directories only; nothing under one is
 *               reported (`__pycache__/`)
 *   a/b         a `/` inside: matches the last components of a path, at
 *               any depth (`node_modules/.cache/` is `.cache` directly in a
 *               `node_modules`, wherever that is)
 *   /a/b        a leading `/`: anchored at the workspace's root
 * The empty list ignores nothing. Bounds: SG_IGNORE_MAX_PATTERNS patterns,
 * SG_IGNORE_MAX_LEN bytes in all; no control characters, no empty pattern
 * (",," or a trailing comma), no `.` or `..` component.
 *
 * What an ignored file is: the watcher neither tracks nor reports it (a
 * tracked file renamed to an ignored name is reported as deleted, unless
 * a file takes its place: an editor's backup by rename). It is still part
 * of the workspace: checkpoints hold it and rollback restores it. */
#ifndef SG_IGNORE_H
#define SG_IGNORE_H

#include <stdbool.h>
#include <stddef.h>

#include "base/err.h"

#define SG_IGNORE_MAX_PATTERNS 256
#define SG_IGNORE_MAX_LEN 8192

/* The default list, used when the operator gives none (create's
 * --capture-ignore replaces it whole). docs/EVENTS.md lists it. */
#define SG_IGNORE_DEFAULT                                                                   \
    "*.swp,*.swo,*.swx,*~,.#*,#*#,.*.kate-swp,.DS_Store,__pycache__/,*.pyc,*.pyo,"        \
    ".pytest_cache/,.mypy_cache/,.ruff_cache/,node_modules/.cache/,.sass-cache/"

typedef struct sg_ignore sg_ignore;

/* Parses a list (see above); NULL with err on a bad one (which pattern,
 * and why). */
sg_ignore *sg_ignore_parse(const char *list, sg_err *err);

/* The list a sandbox uses: the operator's when given (create's
 * --capture-ignore, kept in the sandbox record), else the default. Issue
 * 26's configuration file will give the default here: one place to change. */
const char *sg_ignore_effective(const char *operator_list);

/* Whether the path (relative to the workspace root, '/'-separated, no
 * leading '/') is ignored, looking at its last component only: a caller
 * walking a tree stops at an ignored directory. */
bool sg_ignore_match(const sg_ignore *ig, const char *path, bool is_dir);

/* Whether the path or any directory above it is ignored. */
bool sg_ignore_match_tree(const sg_ignore *ig, const char *path, bool is_dir);

/* Whether some pattern needs more than a name (has a `/` inside): a caller
 * that has only the name at hand builds the path then. */
bool sg_ignore_needs_path(const sg_ignore *ig);

size_t sg_ignore_count(const sg_ignore *ig);

void sg_ignore_free(sg_ignore *ig);

#endif
