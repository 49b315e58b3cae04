// Shard sets: writing shards and their manifest, and listing a data path's shards against it.
#include "engine/data/shard_set.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <set>

#include "engine/base/hash.h"
#include "engine/base/json.h"
#include "engine/io/safetensors.h"

namespace mt {

namespace {

namespace fs = std::filesystem;

constexpr char kFormat[] = "megatrain-token-shards";
constexpr int64_t kManifestVersion = 1;
constexpr uint64_t kMaxManifestBytes = uint64_t(64) << 20;

bool is_mts(const fs::path& p) { return p.extension() == ".mts"; }

// The *.mts names of a directory, sorted.
Result<std::vector<std::string>> mts_names(const std::string& dir) {
  std::error_code ec;
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (is_mts(e.path())) out.push_back(e.path().filename().string());
  if (ec) return not_found("reading directory '" + dir + "': " + ec.message());
  std::sort(out.begin(), out.end());
  return out;
}

Json manifest_json(const std::vector<ShardEntry>& shards, int vocab, const std::string& tokenizer,
                   const std::string& tokenization, uint64_t documents, uint64_t tokens, uint64_t trained) {
  Json::Array list;
  for (const auto& s : shards)
    list.push_back(Json::object({{"file", fs::path(s.path).filename().string()},
                                 {"documents", int64_t(s.documents)},
                                 {"tokens", int64_t(s.tokens)},
                                 {"bytes", int64_t(s.bytes)},
                                 {"checksum", hex64(s.checksum)}}));
  Json m = Json::object({{"format", kFormat},
                         {"version", kManifestVersion},
                         {"vocab", int64_t(vocab)},
                         {"tokenizer", tokenizer},
                         {"documents", int64_t(documents)},
                         {"tokens", int64_t(tokens)},
                         {"trained_tokens", int64_t(trained)},
                         {"shards", Json::array(std::move(list))}});
  if (!tokenization.empty()) m.set("tokenization", tokenization);  // optional: older manifests lack it
  return m;
}

Result<uint64_t> count_field(const Json& entry, const char* key, const std::function<Status(const std::string&)>& bad) {
  const Json* v = entry.find(key);
  if (!v || !v->is_integer() || v->as_int() < 0) return bad("a shard's '" + std::string(key) + "' is not a count");
  return uint64_t(v->as_int());
}

// One entry of the manifest's "shards": a plain *.mts name in `dir`, its counts and checksum.
Result<ShardEntry> parse_entry(const Json& e, const std::string& dir,
                               const std::function<Status(const std::string&)>& bad) {
  const Json* file = e.is_object() ? e.find("file") : nullptr;
  if (!file || !file->is_string()) return bad("a shard entry has no 'file' name");
  const std::string& name = file->as_string();
  if (name.empty() || name[0] == '.' || name.find('/') != std::string::npos || !is_mts(name))
    return bad("shard name '" + name + "' is not a *.mts file name in the directory");
  ShardEntry s;
  s.path = (fs::path(dir) / name).string();
  MT_ASSIGN_OR_RETURN(s.documents, count_field(e, "documents", bad));
  MT_ASSIGN_OR_RETURN(s.tokens, count_field(e, "tokens", bad));
  MT_ASSIGN_OR_RETURN(s.bytes, count_field(e, "bytes", bad));
  const Json* sum = e.find("checksum");
  char* end = nullptr;
  if (!sum || !sum->is_string() || sum->as_string().size() != 16 ||
      (s.checksum = std::strtoull(sum->as_string().c_str(), &end, 16), *end != '\0'))
    return bad("shard '" + name + "' has no 16-digit hex 'checksum'");
  return s;
}

Result<Json> manifest_json_of(const std::string& path) {
  MT_ASSIGN_OR_RETURN(const std::string text, read_data_file(path, kMaxManifestBytes));
  auto json = Json::parse(text);
  if (!json.ok()) return data_loss("'" + path + "': " + json.status().message());
  return json;
}

Result<std::vector<ShardEntry>> read_manifest(const std::string& dir) {
  const std::string path = (fs::path(dir) / kShardManifest).string();
  auto bad = [&](const std::string& what) { return data_loss("'" + path + "': " + what); };
  MT_ASSIGN_OR_RETURN(const Json json, manifest_json_of(path));
  const Json* format = json.find("format");
  const Json* version = json.find("version");
  const Json* shards = json.find("shards");
  if (!format || !format->is_string() || format->as_string() != kFormat)
    return bad("not a token shard manifest (its \"format\" is not \"" + std::string(kFormat) + "\")");
  if (!version || !version->is_integer() || version->as_int() != kManifestVersion)
    return bad("unsupported manifest version (this build reads version 1)");
  if (!shards || !shards->is_array() || shards->items().empty()) return bad("\"shards\" lists no shard");
  std::vector<ShardEntry> out;
  std::set<std::string> seen;
  for (const Json& e : shards->items()) {
    MT_ASSIGN_OR_RETURN(ShardEntry s, parse_entry(e, dir, bad));
    if (!seen.insert(s.path).second) return bad("'" + s.path + "' is listed twice");
    out.push_back(std::move(s));
  }
  return out;
}

// Every listed shard is in the directory and every shard in it is listed.
Status check_listing(const std::string& dir, const std::vector<ShardEntry>& listed) {
  MT_ASSIGN_OR_RETURN(const std::vector<std::string> present, mts_names(dir));
  std::set<std::string> names;
  for (const auto& s : listed) {
    names.insert(fs::path(s.path).filename().string());
    std::error_code ec;
    if (!fs::exists(fs::symlink_status(s.path, ec)))
      return data_loss("token shard '" + s.path + "' is listed in " + kShardManifest + " but missing");
  }
  for (const auto& n : present)
    if (!names.count(n))
      return data_loss("token shard '" + (fs::path(dir) / n).string() + "' is not listed in " +
                       std::string(kShardManifest) + " (another run's shard?): remove it, or tokenize again");
  return Status::Ok();
}

}  // namespace

ShardSetWriter::ShardSetWriter(std::string dir, int vocab, std::string tokenizer, uint64_t shard_tokens,
                               std::string tokenization)
    : dir_(std::move(dir)), tokenizer_(std::move(tokenizer)), tokenization_(std::move(tokenization)), vocab_(vocab),
      shard_tokens_(shard_tokens), shard_(vocab) {}

Result<ShardSetWriter> ShardSetWriter::create(const std::string& dir, int vocab, std::string tokenizer,
                                              uint64_t shard_tokens, std::string tokenization) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return invalid_argument("'" + dir + "': " + ec.message());
  MT_ASSIGN_OR_RETURN(const std::vector<std::string> present, mts_names(dir));
  if (fs::exists(fs::path(dir) / kShardManifest, ec))
    return invalid_argument("'" + dir + "' already holds a token shard set (" + std::string(kShardManifest) +
                            "); choose an empty directory");
  if (!present.empty())
    return invalid_argument("'" + dir + "' already holds token shards (" + present.front() +
                            ") without a manifest, a tokenize run's that did not finish; remove them or choose an "
                            "empty directory");
  return ShardSetWriter(dir, vocab, std::move(tokenizer), shard_tokens, std::move(tokenization));
}

Status ShardSetWriter::add(const TokenizedExample& ex) {
  MT_RETURN_IF_ERROR(shard_.add(ex));
  documents_ += 1;
  tokens_ += ex.ids.size();
  return shard_.tokens() >= shard_tokens_ ? flush() : Status::Ok();
}

Status ShardSetWriter::flush() {
  if (shard_.documents() == 0) return Status::Ok();
  char name[32];
  std::snprintf(name, sizeof name, "shard-%05llu.mts", (unsigned long long)written_.size());
  trained_ += shard_.trained_tokens();  // the shard's, counted as it was filled
  MT_ASSIGN_OR_RETURN(ShardEntry e, shard_.write((fs::path(dir_) / name).string()));
  written_.push_back(std::move(e));
  return Status::Ok();
}

Status ShardSetWriter::finish() {
  MT_RETURN_IF_ERROR(flush());
  if (written_.empty()) return data_loss("no example to write: every input tokenized to nothing");
  // Each shard's rename is already durable (replace_file_durable): the manifest vouches for them last.
  const std::string path = (fs::path(dir_) / kShardManifest).string();
  const Json m = manifest_json(written_, vocab_, tokenizer_, tokenization_, documents_, tokens_, trained_);
  return replace_file_durable(path, path + ".tmp", m.dump(2) + "\n");
}

Result<ShardListing> list_shards(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    if (!fs::exists(path, ec)) return not_found("no token shard or directory '" + path + "'");
    return ShardListing{{ShardEntry{path}}, false};
  }
  if (!fs::exists(fs::symlink_status(fs::path(path) / kShardManifest, ec))) {
    MT_ASSIGN_OR_RETURN(const std::vector<std::string> present, mts_names(path));
    if (present.empty()) return not_found("directory '" + path + "' holds no token shards (*.mts)");
    return data_loss("directory '" + path + "' holds token shards but no " + std::string(kShardManifest) +
                     ", which `megatrain tokenize` writes last: the run that wrote them did not finish, or did not "
                     "write them all. Tokenize again into an empty directory, or name one shard file as the path");
  }
  MT_ASSIGN_OR_RETURN(std::vector<ShardEntry> listed, read_manifest(path));
  MT_RETURN_IF_ERROR(check_listing(path, listed));
  return ShardListing{std::move(listed), true};
}

ShardTokenizer shard_set_tokenizer(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return {};
  const auto json = manifest_json_of((fs::path(path) / kShardManifest).string());
  if (!json.ok()) return {};
  const Json* name = json->find("tokenizer");
  const Json* tokenization = json->find("tokenization");
  if (!tokenization || !tokenization->is_string()) return {};
  return {name && name->is_string() ? name->as_string() : "", tokenization->as_string()};
}

Status check_manifest_entry(const ShardEntry& listed, const TokenShard& opened) {
  const ShardEntry got = opened.entry();
  if (got.documents == listed.documents && got.tokens == listed.tokens && got.bytes == listed.bytes &&
      got.checksum == listed.checksum)
    return Status::Ok();
  return data_loss("token shard '" + listed.path + "' is not the shard " + std::string(kShardManifest) + " lists (" +
                   std::to_string(got.documents) + " documents, " + std::to_string(got.tokens) +
                   " tokens, checksum " + hex64(got.checksum) + "; listed: " + std::to_string(listed.documents) +
                   ", " + std::to_string(listed.tokens) + ", " + hex64(listed.checksum) + ")");
}

}  // namespace mt
