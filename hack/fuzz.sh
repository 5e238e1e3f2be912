#!/usr/bin/env bash
# hack/fuzz.sh TARGET PKG FUZZTIME [go test flags...]: runs one fuzz target
# for FUZZTIME (make fuzz-smoke).
#
# Go's fuzzing coordinator can fail a target with a bare "context deadline
# exceeded" when -fuzztime ends while a starved worker is still in a call (a
# race in internal/fuzz, seen on a busy 2-core machine: no input found, none
# written). Such a run, and only such a run, is run once more; a run that
# wrote a failing input, or failed any other way, fails.
set -u
target=$1 pkg=$2 fuzztime=$3
shift 3
go=${GO:-go}
dir=${pkg%/}/testdata/fuzz/$target
inputs() { ls "$dir" 2>/dev/null | sort; }
before=$(inputs)
for attempt in 1 2; do
	out=$("$go" test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$@" "$pkg" 2>&1)
	rc=$?
	printf '%s\n' "$out"
	if [ "$rc" -eq 0 ]; then
		exit 0
	fi
	if [ "$(inputs)" != "$before" ] || ! grep -q '^    context deadline exceeded$' <<<"$out"; then
		exit "$rc"
	fi
	[ "$attempt" -eq 1 ] && echo "fuzz-smoke: $target failed with Go's fuzzing deadline race and wrote no input; running it once more"
done
exit "$rc"
