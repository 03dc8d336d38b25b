#!/bin/sh
# Installs tandem's preload library from its Debian package into an image and lists it in
# /etc/ld.so.preload, so that every process of the container loads it (docs/install.md).
# Only the library and the PyTorch helpers: tandemd runs on the host, and the container reaches
# it through the bind-mounted /run/tandem.
#   install-preload.sh PACKAGE.deb [ROOT]     (ROOT: the image's root, default /)
set -eu
deb=$1
root=${2:-/}
lib=/usr/lib/tandem/libtandem.so
mkdir -p "$root"
dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$root" ".$lib" ./usr/share/tandem/python/tandem_torch.py \
  ./usr/share/tandem/python/tandem_microbatch.py
# Once only, whatever else the file lists.
touch "$root/etc/ld.so.preload"
grep -qx "$lib" "$root/etc/ld.so.preload" || echo "$lib" >> "$root/etc/ld.so.preload"
