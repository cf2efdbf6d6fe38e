# Sourced by the measurement scripts. For those that compare this checkout with a build
# before it:
# `builds REVISION WORK` builds this checkout's `loader` into $new and REVISION's, in a git
# worktree of its own under WORK (kept, so later runs reuse it), into $old.
builds() {
  local before=$1 work=$2 target
  mkdir -p "$work"
  cargo build --release -q -p loader-cli
  target=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
  new=$target/release/loader
  if [ ! -x "$work/before/target/release/loader" ]; then
    rm -rf "$work/before"
    git worktree add --force --detach "$work/before" "$before" >/dev/null
    (cd "$work/before" && CARGO_TARGET_DIR="$work/before/target" cargo build --release -q -p loader-cli)
  fi
  old=$work/before/target/release/loader
}

# `serve_s3 DIR [ARGS...]` starts `$new serve s3 DIR ARGS...` in the background ($server is
# its pid, $log its output) and sets $opts, the `--option` flags that reach it. The caller
# sets the trap that stops it.
serve_s3() {
  local dir=$1
  shift
  log=$(mktemp)
  "$new" serve s3 "$dir" "$@" > "$log" &
  server=$!
  for _ in $(seq 100); do grep -q '^press Ctrl-C' "$log" && break; sleep 0.1; done
  opts=(--option "aws_endpoint=$(sed -n 's/^endpoint: //p' "$log")"
        --option "aws_access_key_id=$(sed -n 's/^access key: //p' "$log")"
        --option "aws_secret_access_key=$(sed -n 's/^secret key: //p' "$log")"
        --option aws_region=us-east-1)
}
