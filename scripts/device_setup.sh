#!/usr/bin/env bash
# On a GPU machine without a package registry: reassemble the wheel parts that
# scripts/device_wheels.sh made and install every wheel into /tmp/site (no deps, no index).
#
#   bash scripts/device_setup.sh [WHEEL_DIRS...]     # default: .whl .whl-part*
#   export PYTHONPATH=/tmp/site:$PWD/src
#
# Parts may arrive over several transfers (each under a size limit): copy each batch with this
# script as it arrives; it installs once every part of every split wheel is in /tmp/eapo-parts.
set -euo pipefail
PARTS=/tmp/eapo-parts
SITE=${EAPO_DEVICE_SITE:-/tmp/site}
mkdir -p "$PARTS"
dirs=("$@")
[[ ${#dirs[@]} -gt 0 ]] || dirs=(.whl .whl-part*)
for d in "${dirs[@]}"; do
    [[ -d "$d" ]] && find "$d" -maxdepth 1 -type f \( -name '*.whl' -o -name '*.part-*' -o -name '*.parts' -o -name MANIFEST \) -exec cp {} "$PARTS"/ \;
done
[[ -f "$PARTS/MANIFEST" ]] || { echo "device_setup: waiting for the folder that holds MANIFEST (.whl)"; exit 0; }
missing=0
for manifest in "$PARTS"/*.parts; do
    [[ -e "$manifest" ]] || continue
    whl="$PARTS/$(basename "$manifest" .parts)"
    want=$(cat "$manifest")
    have=$(find "$PARTS" -maxdepth 1 -name "$(basename "$whl").part-*" | wc -l)
    if [[ "$have" -lt "$want" ]]; then
        echo "device_setup: $(basename "$whl"): $have of $want parts so far"; missing=1
    elif [[ ! -f "$whl" ]]; then
        cat "$whl".part-* > "$whl"
    fi
done
while read -r name; do
    [[ -f "$PARTS/$name" ]] || { [[ -f "$PARTS/$name.parts" ]] || echo "device_setup: $name not here yet"; missing=1; }
done < "$PARTS/MANIFEST"
if [[ $missing -eq 0 ]]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" $(sed "s|^|$PARTS/|" "$PARTS/MANIFEST")
    echo "device_setup: installed $(wc -l < "$PARTS/MANIFEST") wheels into $SITE"
fi
