#include "store/statement.hpp"

#include <sqlite3.h>

#include <fmt/format.h>

namespace tracr::store {

Statement::Statement(sqlite3* db, const char* sql) : db_(db) { rc_ = sqlite3_prepare_v2(db, sql, -1, &st_, nullptr); }
Statement::~Statement() { sqlite3_finalize(st_); }
bool Statement::prepared() const { return rc_ == SQLITE_OK && st_; }

void Statement::bind(int i, int64_t v) { sqlite3_bind_int64(st_, i, v); }
void Statement::bind(int i, int v) { sqlite3_bind_int64(st_, i, v); }
void Statement::bind(int i, double v) { sqlite3_bind_double(st_, i, v); }
void Statement::bind(int i, std::string_view s) {
  sqlite3_bind_text(st_, i, s.data(), static_cast<int>(s.size()), SQLITE_TRANSIENT);
}
void Statement::bind_null(int i) { sqlite3_bind_null(st_, i); }
void Statement::bind_text_or_null(int i, std::string_view s) {
  if (s.empty())
    bind_null(i);
  else
    bind(i, s);
}
int Statement::step() { return sqlite3_step(st_); }
bool Statement::next_row() { return step() == SQLITE_ROW; }
Status Statement::run(const std::string& what) {
  if (step() != SQLITE_DONE) return error(what);
  return {};
}
Error Statement::error(const std::string& what) const {
  return make_error(Errc::io, what + ": " + (db_ ? sqlite3_errmsg(db_) : "out of memory"));
}
void Statement::reset() {
  sqlite3_reset(st_);
  sqlite3_clear_bindings(st_);
}
int64_t Statement::i64(int c) const { return sqlite3_column_int64(st_, c); }
double Statement::dbl(int c) const { return sqlite3_column_double(st_, c); }
bool Statement::is_null(int c) const { return sqlite3_column_type(st_, c) == SQLITE_NULL; }
std::string Statement::text(int c) const {
  const unsigned char* p = sqlite3_column_text(st_, c);
  return p ? std::string(reinterpret_cast<const char*>(p), sqlite3_column_bytes(st_, c)) : std::string();
}

Error db_error(sqlite3* db, const std::string& path, const std::string& what) {
  const int code = db ? sqlite3_errcode(db) : SQLITE_ERROR;
  std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
  if (code == SQLITE_NOTADB)
    return make_error(
        Errc::io,
        fmt::format("{}: not an SQLite database ({}); expected a tracr results database", path, msg));
  return make_error(Errc::io, fmt::format("{}: sqlite: {} ({})", path, msg, what));
}

Status exec(sqlite3* db, const std::string& path, const char* sql, const char* what) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string m = err ? err : "unknown error";
    sqlite3_free(err);
    Error e = db_error(db, path, what);
    if (e.message.find(m) == std::string::npos) e.message += ": " + m;
    return e;
  }
  return {};
}

int64_t last_insert_rowid(sqlite3* db) { return sqlite3_last_insert_rowid(db); }

Status Transaction::begin() {
  TRACR_TRY(exec(db_, path_, "BEGIN IMMEDIATE", "begin transaction"));
  open_ = true;
  return {};
}
Status Transaction::commit() {
  TRACR_TRY(exec(db_, path_, "COMMIT", "commit"));
  open_ = false;
  return {};
}
Transaction::~Transaction() {
  if (open_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
}

}  // namespace tracr::store
