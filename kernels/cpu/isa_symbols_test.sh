#!/usr/bin/env bash
# Fails when an instruction-set library defines a symbol outside its own
# namespace. Such a symbol (an inline helper, a template instantiation, the
# standard library's included) can also be emitted by other translation
# units, and the linker keeps one copy for the whole program: possibly the
# one compiled for AVX-512, which then runs on every CPU (docs/ARCHITECTURE.md,
# "Instruction-set units").
#
# Usage: isa_symbols_test.sh NAMESPACE FILE... [-- NAMESPACE FILE...]...
# Each FILE is one of a library's outputs; its static archives are read.
set -uo pipefail

# The mangled form of a namespace's entities: _ZN7ringmoe7kernels4avx2...
# for its functions and variables (_ZNK... for const member functions),
# _ZZN... for what is local to one of its functions (lambdas, statics;
# _ZZZN... for what is local to one of those, a lambda's lambda), and
# _ZGV/_ZTH/_ZTW/_ZTV/_ZTI/_ZTS for guard variables, thread-local
# wrappers, vtables and type information of either.
mangled_prefix() {
  local prefix='' part
  IFS=':' read -ra parts <<<"${1//::/:}"
  for part in "${parts[@]}"; do prefix+="${#part}$part"; done
  echo "_Z(GV|TH|TW|TV|TI|TS)?Z*N[KVr]*$prefix"
}

failures=0
checked=0
check_library() {
  local ns=$1
  shift
  local archives=()
  for f in "$@"; do [[ $f == *.a ]] && archives+=("$f"); done
  if ((${#archives[@]} == 0)); then
    echo "FAIL: no static archive among $* (namespace $ns)"
    failures=$((failures + 1))
    return
  fi
  for a in "${archives[@]}"; do
    local symbols
    # -A: "archive:member:address type name"; defined symbols, local ones
    # too, except the assembler's own labels (.L*), which cannot be linked,
    # the local module constructors and destructors a sanitizer build
    # adds to every translation unit (_sub_I_*, _sub_D_*), and the word
    # holding the address of the C++ runtime's unwinding personality
    # (DW.ref.__gxx_personality_v0: data, the same in every unit, emitted
    # where a function needs unwinding, as ASan's stack cleanups do).
    if ! symbols=$(nm -A --defined-only "$a"); then
      echo "FAIL: nm could not read $a"
      failures=$((failures + 1))
      continue
    fi
    symbols=$(printf '%s\n' "$symbols" | sed -nE 's/^[^:]*:[^:]*:[0-9a-f]* +(. .*)$/\1/p' |
      grep -v -E '^. \.L|^t _sub_[ID]_[0-9_]+$|^V DW\.ref\.__gxx_personality_v0$')
    local outside
    outside=$(printf '%s\n' "$symbols" | grep -v -E "^. $(mangled_prefix "$ns")" || true)
    checked=$((checked + $(printf '%s\n' "$symbols" | grep -c .)))
    if [[ -n $outside ]]; then
      echo "FAIL: $a defines $(printf '%s\n' "$outside" | sort -u | wc -l) symbol(s) outside ${ns}::"
      printf '%s\n' "$outside" | sort -u | c++filt | head -40 | sed 's/^/    /'
      failures=$((failures + 1))
    fi
  done
}

ns=
files=()
for arg in "$@" --; do
  if [[ $arg == -- ]]; then
    [[ -n $ns ]] && check_library "$ns" "${files[@]}"
    ns=
    files=()
  elif [[ -z $ns ]]; then
    ns=$arg
  else
    files+=("$arg")
  fi
done

if ((checked == 0)); then
  echo "FAIL: no symbols read (wrong arguments?)"
  exit 1
fi
if ((failures > 0)); then exit 1; fi
echo "PASS: $checked symbols, each inside its library's namespace"
