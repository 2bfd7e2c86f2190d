#!/usr/bin/env bash
# Refresh the vendored axe-core in tests/browser/vendor/ from the npm
# registry. The browser tests inject axe.min.js into each page of the
# built site (tests/browser/test_accessibility.py), offline.
#
#   tests/browser/vendor/vendor_axe.sh          # the pinned version below
#   tests/browser/vendor/vendor_axe.sh 4.15.0   # another (then update PINNED)
#
# Copies axe.min.js and its licences (MPL-2.0, and the third-party
# notices), and writes VERSION and README.txt with the tarball's hashes.
set -euo pipefail

PINNED=4.14.1
VERSION="${1:-$PINNED}"
DEST="$(cd "$(dirname "$0")" && pwd)"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

cd "$TMP"
npm pack --silent "axe-core@$VERSION" >/dev/null
tar xzf "axe-core-$VERSION.tgz"
PKG="$TMP/package"
INTEGRITY="$(npm view "axe-core@$VERSION" dist.integrity)"
SHA256="$(sha256sum "axe-core-$VERSION.tgz" | cut -d' ' -f1)"

cp "$PKG/axe.min.js" "$PKG/LICENSE" "$PKG/LICENSE-3RD-PARTY.txt" "$DEST/"
echo "$VERSION" >"$DEST/VERSION"
cat >"$DEST/README.txt" <<TXT
axe-core $VERSION, vendored for the browser tests (no CDN, no npm at
test time). Refresh with tests/browser/vendor/vendor_axe.sh.
Source: npm package axe-core@$VERSION
  integrity $INTEGRITY
  sha256    $SHA256
Files: axe.min.js, LICENSE (MPL-2.0), LICENSE-3RD-PARTY.txt.
TXT
echo "vendored axe-core $VERSION into $DEST"
