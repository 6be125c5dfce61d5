#!/usr/bin/env bash
# Vendors htmx from the npm registry into the console's embedded assets, so
# `go build` needs no Node.js. Run it to change the version; commit the
# result (the file and its checksum in VENDORED).
set -euo pipefail
version="${1:-2.0.11}"
here="$(cd "$(dirname "$0")/.." && pwd)"
dest="$here/server/console/static"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "htmx.org@$version" >/dev/null && tar xzf "htmx.org-$version.tgz")
cp "$work/package/dist/htmx.min.js" "$dest/htmx.min.js"
cp "$work/package/LICENSE" "$dest/htmx.LICENSE"
sum="$(sha256sum "$dest/htmx.min.js" | cut -d' ' -f1)"
printf 'htmx.org %s (npm) htmx.min.js sha256 %s\n' "$version" "$sum" > "$dest/VENDORED"
echo "vendored htmx $version: $sum"
