#!/usr/bin/env bash
# `xlctl completion bash|zsh`: the generated script completes subcommands,
# nested subcommands, each subcommand's own options and the values of -o,
# then falls back to file names; zsh loads it through bashcompinit.
# Usage: completion_test.sh XLCTL
set -u
XLCTL="$1"
fail=0
source <("$XLCTL" completion bash) || { echo "FAIL: the bash script does not load"; exit 1; }

complete_words() {  # the words typed; the last is being completed
  COMP_WORDS=("$@")
  COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
  COMPREPLY=()
  _xlctl
  echo "${COMPREPLY[*]}"
}
expect() {  # expect WANT GOT WHAT
  if [[ " $2 " != *" $1 "* ]]; then
    echo "FAIL: $3: wanted '$1' in '$2'"; fail=1
  else
    echo "ok: $3"
  fi
}
refuse() {
  if [[ " $2 " == *" $1 "* ]]; then
    echo "FAIL: $3: '$1' should not be offered in '$2'"; fail=1
  else
    echo "ok: $3"
  fi
}

expect submit "$(complete_words xlctl su)" "top-level subcommand"
expect metrics "$(complete_words xlctl me)" "metrics subcommand"
expect completion "$(complete_words xlctl comp)" "completion subcommand"
expect --nodes "$(complete_words xlctl submit --no)" "an option of submit"
refuse --nodes "$(complete_words xlctl list --no)" "submit's option not offered to list"
expect --server "$(complete_words xlctl get 42 --se)" "a global option after a subcommand"
expect csv "$(complete_words xlctl metrics 7 -o c)" "values of -o"
expect RUNNING "$(complete_words xlctl list --state R)" "values of --state"
expect create "$(complete_words xlctl token cr)" "a nested subcommand"
expect --admin "$(complete_words xlctl token create --ad)" "an option of a nested subcommand"
tmp=$(mktemp -d)
touch "$tmp/job-file.yaml"
expect "$tmp/job-file.yaml" "$(complete_words xlctl submit "$tmp/job-f")" "file names after the subcommand"
rm -rf "$tmp"

if "$XLCTL" completion fish >/dev/null 2>&1; then
  echo "FAIL: an unknown shell is accepted"; fail=1
else
  echo "ok: an unknown shell is refused"
fi

if command -v zsh >/dev/null; then
  if zsh -c "source <('$XLCTL' completion zsh) && (( \${+functions[_xlctl]} )) && [[ \${_comps[xlctl]} == _bash_complete* || -n \${_comps[xlctl]} ]]"; then
    echo "ok: zsh loads it"
  else
    echo "FAIL: zsh does not load the script"; fail=1
  fi
else
  echo "skip: no zsh here"
fi
exit $fail
