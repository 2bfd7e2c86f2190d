#!/usr/bin/env bash
# Refresh the self-hosted KaTeX in docs/assets/katex/ from the npm registry.
#
#   ./vendor_katex.sh            # the pinned version below
#   ./vendor_katex.sh 0.19.2     # another version (then update PINNED)
#
# Copies katex.min.js, katex.min.css, contrib/auto-render.min.js, the woff2
# fonts and the licence. The CSS is trimmed to woff2 only (every browser
# that runs the site reads woff2), so the .woff/.ttf files are not needed.
set -euo pipefail

PINNED=0.19.1
VERSION="${1:-$PINNED}"
ROOT="$(cd "$(dirname "$0")" && pwd)"
DEST="$ROOT/docs/assets/katex"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

cd "$TMP"
npm pack --silent "katex@$VERSION" >/dev/null
tar xzf "katex-$VERSION.tgz"
PKG="$TMP/package"
INTEGRITY="$(npm view "katex@$VERSION" dist.integrity)"
SHA256="$(sha256sum "katex-$VERSION.tgz" | cut -d' ' -f1)"

rm -rf "$DEST"
mkdir -p "$DEST/fonts" "$DEST/contrib"
cp "$PKG/LICENSE" "$PKG/dist/katex.min.js" "$DEST/"
cp "$PKG/dist/contrib/auto-render.min.js" "$DEST/contrib/"
cp "$PKG"/dist/fonts/*.woff2 "$DEST/fonts/"
# Keep only the woff2 source of each @font-face.
sed -E \
  -e 's/,url\(fonts\/[^)]*\.woff\) format\("woff"\)//g' \
  -e 's/,url\(fonts\/[^)]*\.ttf\) format\("truetype"\)//g' \
  "$PKG/dist/katex.min.css" >"$DEST/katex.min.css"

# Every font the CSS names must be here, and nothing but woff2 is named.
if grep -Eo 'url\([^)]*\)' "$DEST/katex.min.css" | grep -qv '\.woff2)'; then
  echo "katex.min.css still names a non-woff2 font" >&2
  exit 1
fi
for url in $(grep -Eo 'fonts/[A-Za-z0-9_-]+\.woff2' "$DEST/katex.min.css"); do
  [ -f "$DEST/$url" ] || { echo "missing $url" >&2; exit 1; }
done

echo "$VERSION" >"$DEST/VERSION"
cat >"$DEST/README.txt" <<TXT
KaTeX $VERSION, self-hosted (no CDN). Refresh with ./vendor_katex.sh.
Source: npm package katex@$VERSION
  integrity $INTEGRITY
  sha256    $SHA256
Files: dist/katex.min.js, dist/katex.min.css (trimmed to woff2 fonts),
dist/contrib/auto-render.min.js, dist/fonts/*.woff2, LICENSE (MIT).
TXT
echo "vendored KaTeX $VERSION into ${DEST#"$ROOT"/}"
