// Document boundaries from the data: positions from an end-of-document token (a boundary at the
// last token, a document of length 1), their validation, data.eod_id in the job spec, and a
// token file's documents on resume.
#include <gtest/gtest.h>

#include <fstream>
#include <vector>

#include "engine/base/json.h"
#include "engine/data/data_source.h"
#include "engine/job/job.h"
#include "engine/job/job_spec.h"
#include "tests/engine/temp_dir.h"

namespace mt {
namespace {

Batch batch_of(std::vector<int32_t> inputs, int T) {
  Batch b;
  b.num_seqs = int(inputs.size()) / T;
  b.seq_len = T;
  b.targets.assign(inputs.size(), 1);
  b.inputs = std::move(inputs);
  return b;
}

TEST(VarlenDocuments, TheTokenAfterAnEodStartsADocument) {
  // eod = 9. Row 0: an eod ends "5 9"; "3 9" next; the lone "9" is a document of length 1.
  // Row 1: the row starts a document; the eod at the last token ends the row's document.
  Batch b = batch_of({5, 9, 3, 9, 9, 2, /**/ 9, 1, 2, 3, 4, 9}, 6);
  mark_documents(b, 9);
  EXPECT_EQ(b.positions, (std::vector<int32_t>{0, 1, 0, 1, 0, 0, /**/ 0, 0, 1, 2, 3, 4}));
  EXPECT_TRUE(validate_batch(b, 16).ok());
  mark_documents(b, 15);  // an id that never occurs: each row one document
  EXPECT_EQ(b.positions, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, /**/ 0, 1, 2, 3, 4, 5}));
}

TEST(VarlenDocuments, PositionsThatDoNotNumberDocumentsAreRefused) {
  Batch b = batch_of({1, 2, 3, 4, 5, 6}, 3);
  for (const auto& bad : std::vector<std::vector<int32_t>>{{0, 2, 3, 0, 1, 2},   // a skip
                                                           {0, 1, 2, 3, 4, 5},   // row 1 not at 0
                                                           {0, 1, -1, 0, 1, 2},  // negative
                                                           {0, 1, 2}}) {        // too few
    b.positions = bad;
    const Status s = validate_batch(b, 16);
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find("position"), std::string::npos) << s.message();
  }
  b.positions = {0, 1, 0, 0, 0, 1};
  EXPECT_TRUE(validate_batch(b, 16).ok());
}

TEST(VarlenDocuments, EodIdOutsideTheVocabularyIsRefused) {
  auto src = make_synthetic_source({1, 64, 16, 2});
  ASSERT_TRUE(src.ok());
  auto r = with_documents(std::move(src).value(), 64, 64);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("data.eod_id"), std::string::npos);
}

TEST(VarlenDocuments, SpecEodIdParsesRoundTripsAndIsChecked) {
  auto j = Json::parse(R"({"model": {"preset": "tiny"}, "data": {"source": "synthetic", "eod_id": 5}})");
  ASSERT_TRUE(j.ok());
  auto s = job_spec_from_json(*j);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->data.eod_id, 5);
  auto back = job_spec_from_json(job_spec_to_json(*s));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->data.eod_id, 5);
  JobSpec none = *s;
  none.data.eod_id = -1;
  EXPECT_NE(job_spec_hash(none), job_spec_hash(*s));  // part of the trajectory
  s->data.eod_id = -2;
  EXPECT_FALSE(validate(*s).ok());
}

// A uint16 token file with eod 0 delimiting documents of lengths 1..7: batches carry the
// documents, and a source seeked to a saved cursor reproduces the next batch exactly.
TEST(VarlenDocuments, TokenFileDocumentsSurviveResume) {
  testing_util::TempDir dir("mt-varlen");
  std::vector<uint16_t> tokens;
  for (int d = 0; tokens.size() < 600; ++d) {
    for (int i = 0; i < d % 7; ++i) tokens.push_back(uint16_t(1 + (d + i) % 30));
    tokens.push_back(0);
  }
  const std::string path = dir / "docs.bin";
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(tokens.data()), std::streamsize(tokens.size() * 2));
  JobSpec spec;
  spec.data.source = "tokens";
  spec.data.path = path;
  spec.data.eod_id = 0;
  auto a = make_data_source(spec, 32);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  Batch first, second, again;
  ASSERT_TRUE((*a)->next_batch(3, 50, first).ok());
  ASSERT_TRUE(validate_batch(first, 32).ok());
  for (size_t i = 1; i < first.inputs.size(); ++i) {
    if (i % 50 == 0) continue;  // a row's start
    EXPECT_EQ(first.positions[i] == 0, first.inputs[i - 1] == 0) << "token " << i;
  }
  const uint64_t cursor = (*a)->cursor();
  ASSERT_TRUE((*a)->next_batch(3, 50, second).ok());
  auto b = make_data_source(spec, 32);
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE((*b)->seek(cursor).ok());
  ASSERT_TRUE((*b)->next_batch(3, 50, again).ok());
  EXPECT_EQ(again.inputs, second.inputs);
  EXPECT_EQ(again.positions, second.positions);
  spec.data.eod_id = 32;  // outside the model's vocabulary
  EXPECT_FALSE(make_data_source(spec, 32).ok());
}

}  // namespace
}  // namespace mt
