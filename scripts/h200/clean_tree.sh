#!/usr/bin/env bash
# Packs the committed tree (HEAD with its history, no work in progress) for a device call:
# writes .h200/clean.bundle (git-ignored; carry it). On the device, run steps from a clone of it:
#   bash scripts/h200/clean_tree.sh            (here)
#   git clone -q .h200/clean.bundle /tmp/clean && cp -r .whl .h200 /tmp/clean/ \
#     && cd /tmp/clean && bash scripts/h200/drive.sh ...      (there)
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .h200
git bundle create -q .h200/clean.bundle HEAD
echo "$(git rev-parse --short HEAD) $(du -h .h200/clean.bundle | cut -f1)"
