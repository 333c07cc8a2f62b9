#!/usr/bin/env bash
# Builds the project's BPF programs (incastlab/bpf/*.bpf.c) into incastlab/bpf/build/*.bpf.o
# with Debian's clang, against a vmlinux.h dumped from this kernel's BTF (CO-RE, so an
# object built here loads on any kernel with BTF). Called by scripts/install.sh; idempotent:
# an object is rebuilt only when its source, a shared header or the kernel's BTF is newer.
set -euo pipefail
cd "$(dirname "$0")/../incastlab/bpf"

for tool in clang bpftool; do
  command -v "$tool" >/dev/null || { echo "build_bpf: $tool is missing (scripts/install.sh installs it)" >&2; exit 1; }
done
BTF=/sys/kernel/btf/vmlinux
[ -r "$BTF" ] || { echo "build_bpf: $BTF is missing: this kernel has no BTF, so BPF programs cannot be built" >&2; exit 1; }

mkdir -p build
# vmlinux.h is the kernel's own types: regenerate it when the running kernel changes.
stamp="build/vmlinux.h.kernel"
if [ ! -s build/vmlinux.h ] || [ "$(cat "$stamp" 2>/dev/null)" != "$(uname -r)" ]; then
  bpftool btf dump file "$BTF" format c > build/vmlinux.h.tmp
  mv build/vmlinux.h.tmp build/vmlinux.h
  uname -r > "$stamp"
fi

arch=$(uname -m)
case "$arch" in
  x86_64) target_arch=x86 ;;
  aarch64) target_arch=arm64 ;;
  *) target_arch="$arch" ;;
esac

shopt -s nullglob
built=0
for src in *.bpf.c; do
  obj="build/${src%.c}.o"
  if [ ! -f "$obj" ] || [ "$src" -nt "$obj" ] || [ build/vmlinux.h -nt "$obj" ] \
     || [ -n "$(find . -maxdepth 1 -name '*.h' -newer "$obj" -print -quit)" ]; then
    clang -g -O2 -target bpf -D__TARGET_ARCH_"$target_arch" -I build -I . \
      -Wall -Werror -c "$src" -o "$obj.tmp"
    mv "$obj.tmp" "$obj"
    built=$((built + 1))
  fi
  # A program the kernel's loader cannot even parse is a build failure, not a run-time one.
  bpftool btf dump file "$obj" >/dev/null
done
objects=(build/*.bpf.o)
echo "==> BPF programs: ${#objects[@]} in incastlab/bpf/build ($built rebuilt)"
