#!/usr/bin/env bash
# Builds `toolhost` (release) at another commit beside the working tree, for an A/B run of
# scripts/http-load.py on the same machine (issue #44: a benchmark that compares within one
# build cannot see the call path get slower from one commit to the next).
#
#   scripts/baseline.sh REF                 prints the path of REF's release binary
#   scripts/baseline.sh REF -- ARGS...      then runs scripts/http-load.py --vs that binary
#                                           with ARGS against this tree's target/release
#
# REF is any commit, tag or branch (the last release tag, or the main the change started
# from). The commit is checked out in target/baseline/src (a git worktree, reused) and built
# with its own target directory, target/baseline/target, so the two builds never share
# artifacts; the binary is kept as target/baseline/toolhost-<commit>. The echo component is
# built from this tree (the contract did not change under it).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: scripts/baseline.sh REF [-- http-load.py args]" >&2; exit 2; }
ref=$1
shift
commit=$(git rev-parse --verify "$ref^{commit}")
short=${commit:0:12}
out=target/baseline/toolhost-$short
if [ ! -x "$out" ]; then
    mkdir -p target/baseline
    if [ ! -d target/baseline/src ]; then
        git worktree add --detach target/baseline/src "$commit" >&2
    else
        git -C target/baseline/src checkout --quiet --detach "$commit"
    fi
    # What an earlier checkout left behind (a crate's folder the commit does not have would
    # be a workspace member without a manifest).
    git -C target/baseline/src clean -fdq
    # The plugins' own workspaces are built by tests/build.rs only for the tests.
    (cd target/baseline/src && CARGO_TARGET_DIR="$PWD/../target" \
        cargo build --release -p toolhost >&2)
    cp target/baseline/target/release/toolhost "$out"
fi
if [ "${1:-}" != "--" ]; then
    echo "$out"
    exit 0
fi
shift
[ -x target/release/toolhost ] || cargo build --release -p toolhost >&2
echo=target/wasm32-plugins/wasm32-wasip2/release/echo.wasm
[ -f "$echo" ] || cargo build --release --target wasm32-wasip2 \
    --manifest-path tests/plugins/Cargo.toml --target-dir target/wasm32-plugins -p echo >&2
exec python3 scripts/http-load.py --toolhost target/release/toolhost --vs "$out" "$@"
