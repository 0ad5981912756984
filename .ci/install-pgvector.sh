#!/usr/bin/env bash
# Build and install pgvector into a PostgreSQL server of this machine (Debian), as root.
#   .ci/install-pgvector.sh [PG_MAJOR]        e.g. 15 (default: the newest in /etc/postgresql)
# The source is Debian's own tarball of pgvector 0.8.0 (from trixie), pinned by sha256, so the
# same bytes are built everywhere; the compiler and PostgreSQL's headers come from apt.
set -euo pipefail

VERSION=0.8.0
SHA256=867a2c328d4928a5a9d6f052cd3bc78c7d60228a9b914ad32aa3db88e9de27b0
URL="http://deb.debian.org/debian/pool/main/p/pgvector/pgvector_${VERSION}.orig.tar.gz"
PG_MAJOR=${1:-$(ls /etc/postgresql | sort -V | tail -n 1)}

if ! command -v "/usr/lib/postgresql/$PG_MAJOR/bin/pg_config" >/dev/null \
  || [[ ! -d "/usr/include/postgresql/$PG_MAJOR/server" ]]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "postgresql-server-dev-$PG_MAJOR" build-essential >/dev/null
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
curl -fsSL --retry 3 -o "$work/pgvector.tar.gz" "$URL"
echo "$SHA256  $work/pgvector.tar.gz" | sha256sum -c --quiet -
tar -xzf "$work/pgvector.tar.gz" -C "$work"
# OPTFLAGS="": a portable build (pgvector defaults to -march=native).
make -s -C "$work/pgvector-$VERSION" PG_CONFIG="/usr/lib/postgresql/$PG_MAJOR/bin/pg_config" \
  OPTFLAGS="" >/dev/null
make -s -C "$work/pgvector-$VERSION" PG_CONFIG="/usr/lib/postgresql/$PG_MAJOR/bin/pg_config" \
  install >/dev/null
echo "pgvector $VERSION installed for PostgreSQL $PG_MAJOR"
