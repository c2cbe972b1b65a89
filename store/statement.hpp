// SQL through the store: a prepared statement (finalized on destruction) and
// a transaction (rolled back unless committed). The only SQLite handles the
// rest of the code sees are the opaque ones ResultsDb::handle() gives.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "protocol/error.hpp"

struct sqlite3;
struct sqlite3_stmt;

namespace tracr::store {

class Statement {
 public:
  Statement(sqlite3* db, const char* sql);
  ~Statement();
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  // False when the SQL did not compile (e.g. a table of a later schema).
  bool prepared() const;

  void bind(int i, int64_t v);
  void bind(int i, int v);
  void bind(int i, double v);
  void bind(int i, std::string_view s);
  void bind_null(int i);
  // Empty text binds NULL.
  void bind_text_or_null(int i, std::string_view s);
  // SQLITE_ROW, SQLITE_DONE or an error code.
  int step();
  // Steps once: true when that gave a row.
  bool next_row();
  // Steps to the end; error io "<what>: <SQLite's message>" when it did not finish.
  Status run(const std::string& what);
  // Error io "<what>: <SQLite's message>" for the connection's last failure.
  Error error(const std::string& what) const;
  void reset();
  int64_t i64(int c) const;
  double dbl(int c) const;
  bool is_null(int c) const;
  std::string text(int c) const;

 private:
  sqlite3* db_;
  sqlite3_stmt* st_ = nullptr;
  int rc_ = 1;  // SQLITE_ERROR until prepared
};

// Error io for a failed operation on the database at `path`: "not an SQLite
// database" when it is none, else SQLite's message and `what`.
Error db_error(sqlite3* db, const std::string& path, const std::string& what);
// Runs SQL without results; db_error (with SQLite's message) on failure.
Status exec(sqlite3* db, const std::string& path, const char* sql, const char* what);
// The rowid of the connection's last INSERT.
int64_t last_insert_rowid(sqlite3* db);

// BEGIN IMMEDIATE on begin(); rolls back on destruction unless committed.
class Transaction {
 public:
  Transaction(sqlite3* db, const std::string& path) : db_(db), path_(path) {}
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  Status begin();
  Status commit();
  ~Transaction();

 private:
  sqlite3* db_;
  const std::string& path_;
  bool open_ = false;
};

}  // namespace tracr::store
