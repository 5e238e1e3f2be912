#!/usr/bin/env bash
# Fails when a file git tracks (or would track: untracked and not ignored) is
# over 1 MB or is an executable binary (ELF, Mach-O, PE), naming each one.
# Everything tracked goes into the module zip that every importer downloads.
# Exceptions are listed, with their reason, in hack/large-files.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
limit=$((1000 * 1000))
allowed=$( (grep -v '^#' hack/large-files.txt || true) | awk 'NF {print $1}')
bad=0
while IFS= read -r -d '' f; do
	[ -f "$f" ] && [ ! -L "$f" ] || continue
	if grep -qxF -- "$f" <<<"$allowed"; then continue; fi
	size=$(stat -c %s -- "$f")
	if [ "$size" -gt "$limit" ]; then
		echo "check-files: $f is $size bytes (over 1 MB): remove it, ignore it, or list it with a reason in hack/large-files.txt" >&2
		bad=1
	fi
	magic=$(head -c 4 -- "$f" | od -An -tx1 | tr -d ' \n')
	case "$magic" in
	7f454c46) kind=ELF ;;
	feedface | feedfacf | cefaedfe | cffaedfe | cafebabe) kind=Mach-O ;;
	4d5a*) kind=PE ;;
	*) kind= ;;
	esac
	if [ -n "$kind" ]; then
		echo "check-files: $f is an executable binary ($kind): build output goes to bin/, which is ignored" >&2
		bad=1
	fi
done < <(git ls-files -z --cached --others --exclude-standard)
exit "$bad"
