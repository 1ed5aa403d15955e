#!/bin/sh
# First start of the PostgreSQL volume: the vector extension in Countersign's database, and a
# role + database each for n8n and (when its password file is mounted) Temporal. Passwords come
# from mounted secret files, never inline: N8N_DB_PASSWORD_FILE, TEMPORAL_DB_PASSWORD_FILE.
set -eu
n8n_file=${N8N_DB_PASSWORD_FILE:-/run/secrets/n8n_db_password}
temporal_file=${TEMPORAL_DB_PASSWORD_FILE:-/run/secrets/temporal_db_password}
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
  -v n8n_pw="$(cat "$n8n_file")" <<'SQL'
CREATE EXTENSION IF NOT EXISTS vector;
CREATE ROLE n8n LOGIN PASSWORD :'n8n_pw';
CREATE DATABASE n8n OWNER n8n;
SQL
if [ -r "$temporal_file" ]; then
  psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
    -v temporal_pw="$(cat "$temporal_file")" <<'SQL'
CREATE ROLE temporal LOGIN CREATEDB PASSWORD :'temporal_pw';
CREATE DATABASE temporal OWNER temporal;
CREATE DATABASE temporal_visibility OWNER temporal;
SQL
fi
