#!/usr/bin/env bash
# README.md cannot rot: run every command block it marks as runnable, check
# that every relative link in README.md, CHANGELOG.md and docs/ names a file
# (and heading) of the repository, and that `make help` lists every .PHONY
# target.
#
#   tests/readme.sh [README]
#
# A runnable block is a ```sh fence right after a line `<!-- runnable -->`;
# every other ```sh fence must follow `<!-- not runnable: <why> -->`.
# Each runs on its own (`bash -euo pipefail`, as a reader pastes it) from the
# repository root, with a private ACCELERATOR_STATE_DIR and TMPDIR that are
# removed afterwards. A block must not depend on another block's variables.
set -uo pipefail
cd "$(dirname "$0")/.."
readme=${1:-README.md}
MAKE=${MAKE:-make}
failed=0
fail() { echo "FAIL $*"; failed=$((failed + 1)); }

work=$(mktemp -d /tmp/accelerator-readme.XXXXXX)
trap 'rm -rf "$work"' EXIT

# ---- the runnable blocks
awk -v dir="$work" '
  /^<!-- runnable -->$/ { marked = NR; next }
  /^<!-- not runnable: .+ -->$/ { excused = NR; next }
  !inblock && /^```(sh|bash)/ && !(marked && NR == marked + 1) && !(excused && NR == excused + 1) {
    printf "line %d: a ```sh block marked neither <!-- runnable --> nor <!-- not runnable: why -->\n", NR; bad = 1
  }
  marked && NR == marked + 1 {
    if ($0 !~ /^```(sh|bash)$/) { printf "line %d: <!-- runnable --> not followed by a ```sh fence\n", NR; bad = 1 }
    else { n++; inblock = 1; out = sprintf("%s/block%02d.sh", dir, n); printf "" > out;
           print NR > (out ".line") }
    marked = 0; next
  }
  inblock && /^```$/ { inblock = 0; close(out); next }
  inblock { print >> out }
  END { if (inblock) { print "an unterminated runnable block"; bad = 1 } exit bad }
' "$readme" || fail "$readme: malformed runnable block"
blocks=("$work"/block*.sh)
[ -e "${blocks[0]}" ] || { fail "$readme: no runnable blocks"; blocks=(); }

for b in "${blocks[@]}"; do
  line=$(cat "$b.line")
  tmp=$(mktemp -d "$work/run.XXXXXX")
  start=$(date +%s%N)
  if env ACCELERATOR_STATE_DIR="$tmp/state" TMPDIR="$tmp" MAKE="$MAKE" \
       bash -euo pipefail "$b" > "$tmp/out" 2>&1 < /dev/null; then
    ms=$((($(date +%s%N) - start) / 1000000))
    printf 'ok   %s:%s (%d.%d s)\n' "$readme" "$line" $((ms / 1000)) $((ms % 1000 / 100))
  else
    fail "$readme:$line: the block exited $?; it was:"
    sed 's/^/    | /' "$b"
    echo "  its output (last 40 lines):"
    tail -n 40 "$tmp/out" | sed 's/^/    > /'
  fi
done

# ---- relative links (and their #anchors) in README.md, CHANGELOG.md and docs/:
# each must name a file of the repository (tracked, or new and not ignored:
# never a build output, never a path outside the checkout). README and docs/
# must not name a Markdown file in `code` that the repository lacks either
# (a contract kept elsewhere, `ABI.md`): link the page that has it.
# CHANGELOG.md is history: its old names stay.
python3 - "$readme" CHANGELOG.md $(git ls-files 'docs/*.md' 'docs/**/*.md' | sort -u) > "$work/links" <<'PY'
import os, re, subprocess, sys

files = set(subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                           capture_output=True, text=True, check=True).stdout.split("\n")) - {""}
dirs = set()
for f in files:
    d = os.path.dirname(f)
    while d and d not in dirs:
        dirs.add(d)
        d = os.path.dirname(d)

def in_repo(path):
    """Whether `path` (normalised, relative to the root) is a file or
    directory of the repository."""
    return not path.startswith("..") and not os.path.isabs(path) and (path in files or path in dirs)

def slugs(path):
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to -."""
    out, seen, fence = set(), {}, False
    for line in open(path, encoding="utf-8"):
        if line.startswith("```"):
            fence = not fence
        m = None if fence else re.match(r"#{1,6} +(.*?) *#* *$", line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-")
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            out.add(slug if n == 0 else f"{slug}-{n}")
    return out

for md in sys.argv[1:]:
    text = re.sub(r"```.*?```", "", open(md, encoding="utf-8").read(), flags=re.S)
    for target in sorted(set(re.findall(r"\]\(([^)\s]+)\)", text))):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        full = os.path.normpath(os.path.join(os.path.dirname(md), path)) if path else md
        if not os.path.exists(full):
            print(f"{md}: link to {target}: no such file")
        elif not in_repo(full):
            print(f"{md}: link to {target}: not a file of the repository")
        elif anchor and full.endswith(".md") and anchor not in slugs(full):
            print(f"{md}: link to {target}: no heading #{anchor} in {full}")
    if md == "CHANGELOG.md":
        continue
    # `name.md` in code outside a link's text: a page of the repository,
    # relative to this page or to the root; a path under a directory the repository does not have
    # (what a tool writes, e.g. the GPU kit's out/report.md) is not a page.
    for name in sorted(set(re.findall(r"`([\w./-]+\.md)`", re.sub(r"\[[^\]]*\]\([^)]*\)", "", text)))):
        here = os.path.normpath(os.path.join(os.path.dirname(md), name))
        if in_repo(here) or in_repo(os.path.normpath(name)):
            continue
        top = os.path.normpath(name).split("/")[0]
        if "/" in name and not name.startswith(("/", "..")) and not in_repo(top):
            continue
        print(f"{md}: `{name}` is not a page of the repository (link the page that has it)")
PY
if [ -s "$work/links" ]; then
  fail "dangling links:"; sed 's/^/    /' "$work/links"
else
  echo "ok   every relative link in $readme, CHANGELOG.md and docs/ names a file (and heading) of the repository; no page names a missing one in code"
fi

# ---- make help lists every .PHONY target
$MAKE --no-print-directory help > "$work/help" 2>&1 || fail "make help exited non-zero"
listed=$(grep '^  [a-z]' "$work/help" | sed 's/^  //; s/  .*//; s/ (default)//; s/, /\n/g' | sort -u)
phony=$($MAKE -pRrq : 2>/dev/null | sed -n 's/^\.PHONY: //p' | tr ' ' '\n' | grep -v '^FORCE$' | sort -u)
missing=$(comm -13 <(echo "$listed") <(echo "$phony"))
unknown=$(comm -23 <(echo "$listed") <(echo "$phony"))
[ -z "$missing" ] || fail "make help lacks a line for: $(echo $missing) (add them to HELP in the Makefile)"
[ -z "$unknown" ] || fail "make help lists targets that are not .PHONY: $(echo $unknown)"
[ -n "$missing$unknown" ] || echo "ok   make help lists all $(echo "$phony" | wc -l) .PHONY targets"

echo "${#blocks[@]} runnable blocks; $failed failed"
[ "$failed" -eq 0 ]
