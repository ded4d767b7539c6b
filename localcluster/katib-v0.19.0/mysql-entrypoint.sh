#!/bin/sh
# katib-mysql's image (mysql:8.0.29, manifests/v1beta1/components/mysql/mysql.yaml of Katib
# v0.19.0) as MariaDB from Debian's mariadb-server-core: the image entrypoint's first-start work
# (a data directory, root@'%' with MYSQL_ROOT_PASSWORD, the MYSQL_DATABASE database), then the
# server on port 3306. Args as the manifest gives them: --datadir <dir>.
set -eu
datadir=/var/lib/mysql
while [ $# -gt 0 ]; do
  case "$1" in
    --datadir) datadir=$2; shift 2 ;;
    --datadir=*) datadir=${1#*=}; shift ;;
    *) shift ;;
  esac
done
if [ ! -d "$datadir/mysql" ]; then
  mkdir -p "$datadir"
  # Its output only matters when it fails (it says why on stdout): then it is the pod's log.
  if ! out=$(mariadb-install-db --no-defaults --datadir="$datadir" --user=root \
      --auth-root-authentication-method=normal --skip-test-db 2>&1); then
    echo "$out" >&2
    exit 1
  fi
  echo "initialized $datadir"
fi
# Run at every start, as idempotent statements: the entrypoint's setup.
cat > "$datadir/../init.sql" <<SQL
CREATE USER IF NOT EXISTS 'root'@'%' IDENTIFIED BY '${MYSQL_ROOT_PASSWORD}';
GRANT ALL ON *.* TO 'root'@'%' WITH GRANT OPTION;
ALTER USER 'root'@'localhost' IDENTIFIED BY '${MYSQL_ROOT_PASSWORD}';
CREATE DATABASE IF NOT EXISTS \`${MYSQL_DATABASE:-katib}\`;
SQL
exec mariadbd --no-defaults --datadir="$datadir" --user=root --port=3306 \
  --bind-address=0.0.0.0 --socket=/tmp/mysqld.sock --pid-file=/tmp/mysqld.pid \
  --init-file="$datadir/../init.sql"
