#!/bin/bash
# Copies the peers that tools/gpu_peers.py compares against into build/peers/
# (ignored by git), from a local git copy of their repositories: the GPU
# machine has no network, and AdaSplash is in no package registry reachable
# here, so its pure Python/Triton package travels as files.
#   tools/fetch_peers.sh [ADASPLASH_GIT] [DEST]
# ADASPLASH_GIT: a clone of github.com/deep-spin/adasplash (its work tree or
# its .git); default /work/.mirror/deep-spin+adasplash/repo, where this
# workplace keeps a mirror of it. DEST: default build/peers. The commit is pinned
# (ADASPLASH_COMMIT below, or $ADASPLASH_COMMIT) so runs compare one version;
# it is recorded in DEST/adasplash/COMMIT and in gpu_peers.py's results.
set -euo pipefail
# Paths given are the caller's; the defaults are the repository's.
src=$(realpath -m "${1:-/work/.mirror/deep-spin+adasplash/repo}")
dest=$(realpath -m "${2:-$(dirname "$0")/../build/peers}")
# deep-spin/adasplash 0.2.0 (README update after the AdaSplash-2 release).
commit=${ADASPLASH_COMMIT:-4b64c94fa4cd60d274dafff3178bb96d2f831edb}

[ -d "$src/.git" ] && src=$src/.git
if ! git --git-dir="$src" rev-parse --verify --quiet "$commit^{commit}" >/dev/null 2>&1; then
  echo "fetch_peers: $src has no commit $commit of deep-spin/adasplash." >&2
  echo "  Bring a copy of github.com/deep-spin/adasplash first (a clone, or a mirror of it)" >&2
  echo "  and pass its path: tools/fetch_peers.sh PATH [DEST]" >&2
  exit 2
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fetch_peers.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# The package folder and its licence (BSD-3-Clause), nothing else.
git --git-dir="$src" archive --format=tar "$commit" adasplash LICENSE | tar -x -C "$tmp"
mv "$tmp/LICENSE" "$tmp/adasplash/LICENSE"
mkdir -p "$dest"
rm -rf "$dest/adasplash"
mv "$tmp/adasplash" "$dest/adasplash"
echo "$commit" > "$dest/adasplash/COMMIT"
echo "fetch_peers: deep-spin/adasplash at $commit -> $dest/adasplash ($(find "$dest/adasplash" -type f | wc -l) files)"
echo "  import with PYTHONPATH=$dest (tools/gpu_peers.py --peers $dest does this)"
