// Campaign draws (harness/controller/campaign_draw.h): the same seed draws the same faults, every
// drawn fault loads through the scenario loader, only kinds valid for the job are drawn, ground
// truth follows the contract's table, and the [campaign] table's keys validate with positions.
#include "harness/controller/campaign_draw.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>

#include "harness/controller/campaign.h"
#include "harness/scenario/registry.h"
#include "harness/scenario/scenario.h"
#include "tests/test_util.h"

namespace nanchaos::harness {
namespace {

using ojson = nlohmann::ordered_json;

// The first fault of seed 11 over kMlp (see SameSeedSameDrawsAndPrefixStable).
const char* PINNED_FIRST_DRAW = R"({"kind":"lr","ranks":[1],"step":8,"factor":1000.0})";

const char* kMlp = R"([scenario]
name = "mlp-camp"
seed = 4

[job]
workload = "mlp"
ranks = 2
steps = 30

[[fault]]
kind = "lr"
factor = 10.0
step = 3

[expect]
detected = true

[campaign]
min_coverage = 0.9
)";

const char* kHalfMse = R"([scenario]
name = "mlp-fp16-mse"

[job]
workload = "mlp"
ranks = 3
steps = 40
precision = "fp16"
grad_allreduce_dtype = "fp16"

[workload]
loss = "mse"
normalize_inputs = true
optimizer = "sgd"
norm = "batchnorm"
)";

const char* kTransformer = R"([scenario]
name = "tf-bf16"

[job]
workload = "transformer"
ranks = 2
steps = 20
precision = "bf16"

[workload]
layers = 2
)";

struct Base {
  Scenario s;
  std::string text;
  CampaignTargets t;
};

Base base(const char* text) {
  Base b;
  b.text = text;
  b.s = load_scenario_string(text, "base.toml");
  b.t = builtin_targets(b.s);
  return b;
}

TEST(CampaignDraw, SameSeedSameDrawsAndPrefixStable) {
  const Base b = base(kMlp);
  const auto kinds = campaign_kinds(b.s, b.t, {});
  const auto a = draw_faults(b.s, b.text, b.t, kinds, 11, 40);
  const auto again = draw_faults(b.s, b.text, b.t, kinds, 11, 40);
  const auto prefix = draw_faults(b.s, b.text, b.t, kinds, 11, 16);
  const auto other = draw_faults(b.s, b.text, b.t, kinds, 12, 40);
  ASSERT_EQ(a.size(), 40u);
  int differ = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].fault, again[i].fault) << i;
    EXPECT_EQ(fault_scenario_toml(b.s, b.text, a[i]), fault_scenario_toml(b.s, b.text, again[i]));
    if (i < prefix.size()) EXPECT_EQ(a[i].fault, prefix[i].fault) << i;
    differ += a[i].fault != other[i].fault;
  }
  EXPECT_GT(differ, 30);  // another seed, other faults
  // A pinned draw: the generator is portable (docs/generator.md), so this never changes by
  // compiler or platform; only a change to the draw itself may change it (update the baseline
  // campaign then: results/baselines/campaign-mlp-default.json).
  EXPECT_EQ(a[0].fault.dump(), PINNED_FIRST_DRAW);
}

const char* kRestarts = R"([scenario]
name = "mlp-restarts"

[job]
workload = "mlp"
ranks = 2
steps = 20
restarts = 1

[checkpoint]
every = 5
)";

TEST(CampaignDraw, RestartsDrawCheckpointFaultsWithACrashAndJudgeStopsAgainstTheCleanRun) {
  const Base b = base(kRestarts);
  const auto kinds = campaign_kinds(b.s, b.t, {});
  ASSERT_NE(std::find(kinds.begin(), kinds.end(), "checkpoint"), kinds.end());
  const auto a = draw_faults(b.s, b.text, b.t, kinds, 5, 60);
  const auto again = draw_faults(b.s, b.text, b.t, kinds, 5, 60);
  std::set<std::string> seen;
  for (size_t i = 0; i < a.size(); ++i) {
    const auto& d = a[i];
    SCOPED_TRACE(d.fault.dump());
    EXPECT_EQ(fault_scenario_toml(b.s, b.text, d), fault_scenario_toml(b.s, b.text, again[i]));
    const Scenario s = load_scenario_string(fault_scenario_toml(b.s, b.text, d), "f.toml");
    const std::string kind = d.fault["kind"];
    seen.insert(kind);
    if (kind == "checkpoint") {
      // The corrupted save (rank 0's, before step 5), then rank 0 crashes at that step so the
      // relaunch loads it; the truth is the checkpoint's.
      ASSERT_EQ(s.faults.size(), 2u);
      EXPECT_EQ(s.faults[0].step, 5);
      EXPECT_EQ(s.faults[1].kind, "crash");
      EXPECT_EQ(s.faults[1].step, 5);
      EXPECT_EQ(d.truth.cause, "checkpoint_corruption");
      EXPECT_EQ(d.truth.step, 5);
    } else {
      ASSERT_EQ(s.faults.size(), 1u);
    }
    const bool stops = kind == "crash" || kind == "hang" || kind == "checkpoint";
    EXPECT_EQ(s.expect.final_matches_clean.value_or(false), stops);
  }
  EXPECT_TRUE(seen.count("checkpoint"));
  EXPECT_TRUE(seen.count("crash"));
  // Without restarts nothing expects the clean run (and checkpoint is not drawn).
  const Base plain = base(kMlp);
  for (const auto& d :
       draw_faults(plain.s, plain.text, plain.t, campaign_kinds(plain.s, plain.t, {}), 5, 30)) {
    EXPECT_FALSE(load_scenario_string(fault_scenario_toml(plain.s, plain.text, d), "f.toml")
                     .expect.final_matches_clean);
  }
}

// Format "dcp": a checkpoint fault corrupts one rank's shard, drawn over the ranks, and that
// rank is its truth (format "torch": rank 0, which writes the one file).
TEST(CampaignDraw, DcpCheckpointFaultsDrawTheShardsRank) {
  const std::string text =
      std::string(kRestarts).replace(std::string(kRestarts).find("ranks = 2"), 9, "ranks = 4") +
      "format = \"dcp\"\n";
  const Base b = base(text.c_str());
  ASSERT_EQ(b.s.checkpoint.format, "dcp");
  std::set<int64_t> shards;
  for (const auto& d : draw_faults(b.s, b.text, b.t, {"checkpoint"}, 5, 40)) {
    SCOPED_TRACE(d.fault.dump());
    ASSERT_EQ(d.fault["ranks"].size(), 1u);
    const int64_t r = d.fault["ranks"][0];
    EXPECT_GE(r, 0);
    EXPECT_LT(r, 4);
    EXPECT_EQ(d.truth.ranks, std::vector<int64_t>{r});
    shards.insert(r);
    const Scenario s = load_scenario_string(fault_scenario_toml(b.s, b.text, d), "f.toml");
    EXPECT_TRUE(s.faults[0].ranks.contains(r));
  }
  EXPECT_GT(shards.size(), 2u);  // not always rank 0
}

TEST(CampaignDraw, EveryDrawnFaultLoadsAndStaysInTheJobsRules) {
  for (const char* text : {kMlp, kHalfMse, kTransformer}) {
    const Base b = base(text);
    SCOPED_TRACE(b.s.name);
    const auto kinds = campaign_kinds(b.s, b.t, {});
    const auto [first, last] = fault_step_window(b.s.job.steps);
    std::set<std::string> kinds_seen, classes;
    for (const auto& d : draw_faults(b.s, b.text, b.t, kinds, 99, 300)) {
      SCOPED_TRACE(d.fault.dump());
      EXPECT_EQ(d.redraws, 0);  // the draw itself respects the loader's rules
      const Scenario s = load_scenario_string(fault_scenario_toml(b.s, b.text, d), "f.toml");
      ASSERT_EQ(s.faults.size(), 1u);
      EXPECT_EQ(s.faults[0].kind, d.fault["kind"]);
      EXPECT_EQ(s.faults[0].step, d.truth.step);
      EXPECT_GE(d.truth.step, first);
      EXPECT_LE(d.truth.step, last);
      EXPECT_FALSE(s.campaign.min_coverage.has_value());  // [campaign] is not copied
      EXPECT_EQ(s.job.steps, b.s.job.steps);
      EXPECT_EQ(s.detectors.enabled, b.s.detectors.enabled);
      kinds_seen.insert(d.fault["kind"].get<std::string>());
      classes.insert(d.fault_class);
    }
    EXPECT_EQ(kinds_seen, std::set<std::string>(kinds.begin(), kinds.end()));
    EXPECT_GT(classes.size(), kinds.size());
  }
}

TEST(CampaignDraw, KindsValidForTheJobOnly) {
  const Base mlp = base(kMlp), half = base(kHalfMse), tf = base(kTransformer);
  const auto fp32 = campaign_kinds(mlp.s, mlp.t, {});
  EXPECT_EQ(std::count(fp32.begin(), fp32.end(), "overflow"), 0);  // fp32: no half range
  EXPECT_EQ(std::count(fp32.begin(), fp32.end(), "state"), 1);
  const auto h = campaign_kinds(half.s, half.t, {});
  EXPECT_EQ(std::count(h.begin(), h.end(), "overflow"), 1);
  EXPECT_EQ(campaign_kinds(tf.s, tf.t, {"tensor", "lr", "tensor"}),
            (std::vector<std::string>{"lr", "tensor"}));
  try {
    campaign_kinds(mlp.s, mlp.t, {"overflow"});
    FAIL() << "overflow drawn for an fp32 job";
  } catch (const CampaignError& e) {
    EXPECT_STREQ(e.what(),
                 "--kinds: overflow: needs [job].precision = \"fp16\" or \"bf16\" (an fp32 module "
                 "does not overflow at the half range)");
  }
  try {
    campaign_kinds(mlp.s, mlp.t, {"tensr"});
    FAIL() << "tensr accepted";
  } catch (const CampaignError& e) {
    // Every registered kind, by name (a new kind's file adds itself to the list).
    std::string kinds;
    for (const auto& [name, info] : fault_kinds()) kinds += (kinds.empty() ? "" : ", ") + name;
    EXPECT_EQ(e.what(),
              "--kinds: \"tensr\" is not a fault kind; did you mean \"tensor\"? kinds: " + kinds);
    EXPECT_NE(kinds.find("batch, bitflip, checkpoint, comm, crash, hang, lr"), std::string::npos)
        << kinds;
  }
  // SGD keeps no optimizer state: no optimizer: target is drawn; fp16 wire: comm bits <= 15.
  for (const auto& d :
       draw_faults(half.s, half.text, half.t, {"bitflip", "comm", "tensor"}, 3, 200)) {
    if (d.fault.contains("target")) {
      EXPECT_EQ(d.fault["target"].get<std::string>().rfind("optimizer:", 0), std::string::npos);
    }
    if (d.fault["kind"] == "comm" && d.fault.contains("bit")) EXPECT_LE(d.fault["bit"], 15);
  }
  EXPECT_THROW(fault_step_window(3), CampaignError);
  EXPECT_EQ(fault_step_window(4), (std::pair<int64_t, int64_t>{1, 1}));
  EXPECT_EQ(fault_step_window(30), (std::pair<int64_t, int64_t>{6, 23}));
}

TEST(CampaignDraw, TruthFollowsTheContractTable) {
  auto t = [](ojson f) { return truth_of(f, 4); };
  auto cause = [&](ojson f) { return t(std::move(f)).cause; };
  const ojson base = {{"ranks", {2}}, {"step", 9}};
  auto with = [&](ojson extra) {
    ojson f = base;
    for (auto& [k, v] : extra.items()) f[k] = v;
    return f;
  };
  EXPECT_EQ(cause(with({{"kind", "tensor"}, {"target", "activation:layers.1"}})), "activation");
  EXPECT_EQ(cause(with({{"kind", "bitflip"}, {"target", "parameter:head.weight"}})), "parameter");
  EXPECT_EQ(cause(with({{"kind", "tensor"}, {"target", "optimizer:head.weight.exp_avg"}})),
            "parameter");
  EXPECT_EQ(*t(with({{"kind", "tensor"}, {"target", "optimizer:head.weight.exp_avg"}})).layer,
            "head.weight");
  EXPECT_EQ(cause(with({{"kind", "tensor"}, {"target", "gradient:head.bias"}})), "gradient");
  EXPECT_EQ(cause(with({{"kind", "tensor"}, {"target", "loss"}})), "loss_math");
  EXPECT_EQ(*t(with({{"kind", "tensor"}, {"target", "loss"}})).layer, "loss");
  EXPECT_EQ(cause(with({{"kind", "batch"}, {"field", "labels"}})), "data");
  EXPECT_EQ(*t(with({{"kind", "batch"}, {"field", "labels"}})).layer, "labels");
  EXPECT_EQ(cause(with({{"kind", "overflow"}, {"target", "activation:head"}})), "fp16_overflow");
  EXPECT_EQ(cause(with({{"kind", "lr"}, {"factor", 1e4}})), "gradient_explosion");
  EXPECT_FALSE(t(with({{"kind", "lr"}, {"factor", 1e4}})).layer.has_value());
  EXPECT_EQ(cause(with({{"kind", "comm"}, {"value", "nan"}})), "comm_corruption");
  EXPECT_EQ(cause(with({{"kind", "hang"}})), "hang");
  EXPECT_EQ(cause(with({{"kind", "crash"}})), "rank_failure");
  EXPECT_EQ(cause(with({{"kind", "state"}, {"field", "lr"}})), "replica_divergence");
  ojson all = with({{"kind", "lr"}});
  all["ranks"] = "all";
  EXPECT_EQ(t(all).ranks, (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(t(all).step, 9);
}

TEST(CampaignTable, ThresholdsValidateWithPositionsAndRunIgnoresThem) {
  const Scenario s = load_scenario_string(kMlp, "c.toml");
  EXPECT_DOUBLE_EQ(*s.campaign.min_coverage, 0.9);
  EXPECT_FALSE(s.campaign.min_attribution_cause.has_value());
  auto error = [](const std::string& campaign) {
    try {
      load_scenario_string(
          "[scenario]\nname = \"x\"\n[job]\nworkload = \"mlp\"\nsteps = 30\n[campaign]\n" +
              campaign,
          "c.toml");
    } catch (const ScenarioError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error("min_coverage = 1.5\n"),
            "c.toml:7:16: error: [campaign].min_coverage: expected float in [0, 1], got 1.5");
  EXPECT_EQ(error("min_atribution_cause = 0.5\n"),
            "c.toml:7:1: error: [campaign] unknown key \"min_atribution_cause\"; did you mean "
            "\"min_attribution_cause\"?");
  EXPECT_EQ(error("min_attribution_rank = \"high\"\n"),
            "c.toml:7:24: error: [campaign].min_attribution_rank: expected float in [0, 1], got "
            "string");
}

TEST(CampaignTable, ThresholdChecks) {
  Scenario s = load_scenario_string(kMlp, "c.toml");
  s.campaign.min_attribution_cause = 0.8;
  results::CampaignSummary sum;
  sum.all.coverage = results::make_rate(19, 20);  // 0.95 >= 0.9
  sum.all.cause = results::make_rate(3, 4);       // 0.75 < 0.8
  const auto j = check_thresholds(s, sum);
  EXPECT_EQ(j["min_coverage"]["pass"], true);
  EXPECT_EQ(j["min_attribution_cause"]["pass"], false);
  EXPECT_FALSE(j.contains("min_attribution_rank"));
  sum.all.cause = results::make_rate(0, 0);  // nothing detected: a minimum is not met
  EXPECT_EQ(check_thresholds(s, sum)["min_attribution_cause"]["pass"], false);
}

TEST(CampaignOptions, KindsSplitTrimsAndRefusesAnEmptyList) {
  EXPECT_EQ(split_kinds_option("tensor,lr"), (std::vector<std::string>{"tensor", "lr"}));
  EXPECT_EQ(split_kinds_option(" tensor , lr "), (std::vector<std::string>{"tensor", "lr"}));
  auto error = [](const std::string& text) {
    try {
      split_kinds_option(text);
    } catch (const CampaignError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // Empty must not mean "every kind": that widens the campaign behind the user's back.
  EXPECT_EQ(error(""),
            "--kinds \"\": names no kind; give comma-separated kinds, e.g. --kinds tensor,lr");
  EXPECT_EQ(error(" , "),
            "--kinds \" , \": names no kind; give comma-separated kinds, e.g. --kinds tensor,lr");
  EXPECT_EQ(error("tensor,,lr"),
            "--kinds \"tensor,,lr\": has an empty item; give comma-separated kinds, e.g. --kinds "
            "tensor,lr");
  EXPECT_NE(error("tensor,").find("has an empty item"), std::string::npos);
}

// The command line, none of it launching a job: an empty --kinds, an --out that holds an earlier
// campaign (after the note that the base scenario's [[fault]] is ignored), and Ctrl-C while a
// large campaign is drawn.
TEST(CampaignOptions, CommandRefusesBadInputsBeforeAnyLaunch) {
  namespace fs = std::filesystem;
  const std::string bin = NANCHAOS_BINARY;
  const std::string dir = test_util::scratch_dir("nanchaos-test", "campaign");
  const std::string file = test_util::write_file(dir, "mlp.toml", kMlp);
  auto kinds =
      test_util::run_cmd(bin + " campaign " + file + " --faults 2 --kinds , --out " + dir + "/k");
  EXPECT_EQ(kinds.code, 2) << kinds.output;
  EXPECT_NE(kinds.output.find("--kinds \",\": names no kind"), std::string::npos) << kinds.output;
  EXPECT_FALSE(fs::exists(dir + "/k"));

  // A seed is what [scenario].seed takes: "-1" was read as 2^64-1.
  for (const std::string seed : {"-1", "1.5", "abc"}) {
    auto bad = test_util::run_cmd(bin + " campaign " + file + " --faults 2 --seed " + seed +
                                  " --out " + dir + "/s");
    EXPECT_EQ(bad.code, 2) << bad.output;
    EXPECT_NE(
        bad.output.find("--seed: expected a whole number >= 0 (as [scenario].seed), got " + seed),
        std::string::npos)
        << bad.output;
  }
  EXPECT_FALSE(fs::exists(dir + "/s"));

  test_util::write_file(dir, "campaign.json", "{}");
  auto out = test_util::run_cmd(bin + " campaign " + file + " --faults 2 --out " + dir);
  EXPECT_EQ(out.code, 2) << out.output;
  EXPECT_NE(out.output.find(file + ": its 1 [[fault]] and its [expect] are ignored"),
            std::string::npos)
      << out.output;
  EXPECT_NE(out.output.find("--out " + dir + ": holds an earlier campaign"), std::string::npos)
      << out.output;
  EXPECT_FALSE(fs::exists(dir + "/faults"));

  // 100000 draws take ~20 s; SIGINT after 2 s must end it then, exit by the signal, with no
  // fault folder written.
  const auto t0 = std::chrono::steady_clock::now();
  auto stop = test_util::run_cmd("{ timeout --preserve-status -s INT 2 " + bin + " campaign " +
                                 file + " --faults 100000 --out " + dir + "/big; echo rc=$?; }");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(stop.output.find("rc=130"), std::string::npos) << stop.output;
  EXPECT_NE(stop.output.find("interrupted by SIGINT before any fault ran"), std::string::npos)
      << stop.output;
  EXPECT_LT(s, 10.0);
  EXPECT_FALSE(fs::exists(dir + "/big/faults"));
}

// Ctrl-C while the faults run: the stdout summary says how many of the drawn faults it measured
// (stderr alone said so before), campaign.json says interrupted, and it exits by the signal.
TEST(CampaignOptions, InterruptedMidRunSaysHowManyFaultsItMeasured) {
  const std::string bin = NANCHAOS_BINARY;
  const std::string dir = test_util::scratch_dir("nanchaos-test", "campaign-mid");
  const std::string file = test_util::write_file(dir, "mlp.toml", kMlp);
  auto stop = test_util::run_cmd("{ timeout --preserve-status -s INT 4 " + bin + " campaign " +
                                 file + " --faults 6 --kinds hang --out " + dir +
                                 "/mid 2>/dev/null; echo rc=$?; }");
  EXPECT_NE(stop.output.find("rc=130"), std::string::npos) << stop.output;
  EXPECT_NE(stop.output.find(" of 6 faults, interrupted (seed "), std::string::npos) << stop.output;
  const auto c = nlohmann::json::parse(std::ifstream(dir + "/mid/campaign.json"));
  EXPECT_EQ(c["interrupted"], true);
  EXPECT_EQ(c["complete"], false);
}

// --values finite: tensor scales by a factor in [1.01, 100], bitflip flips a mantissa bit or one
// of the low exponent bits (0-26 of fp32), comm a finite bit of its wire word; every such fault
// is marked finite, and the same seed draws the same faults.
TEST(CampaignValues, FiniteDrawsFactorsInRangeAndBitsInTheFiniteSet) {
  const Base b = base(kMlp);
  const std::vector<std::string> wanted = {"tensor", "bitflip", "comm"};
  const auto kinds = campaign_kinds(b.s, b.t, wanted, DrawValues::kFinite);
  const auto a = draw_faults(b.s, b.text, b.t, kinds, 7, 120, DrawValues::kFinite);
  const auto again = draw_faults(b.s, b.text, b.t, kinds, 7, 120, DrawValues::kFinite);
  ASSERT_EQ(a.size(), 120u);
  double lo = 1e9, hi = 0;
  std::set<int64_t> bits;
  for (size_t i = 0; i < a.size(); ++i) {
    const ojson& f = a[i].fault;
    EXPECT_EQ(f, again[i].fault) << i;
    EXPECT_TRUE(a[i].finite) << f.dump();
    EXPECT_FALSE(a[i].slows);
    EXPECT_FALSE(f.contains("value")) << f.dump();
    if (f["kind"] == "tensor") {
      const double x = f.at("factor").get<double>();
      EXPECT_GE(x, 1.01) << f.dump();
      EXPECT_LE(x, 100.0) << f.dump();
      lo = std::min(lo, x);
      hi = std::max(hi, x);
    } else {
      const int64_t bit = f.at("bit").get<int64_t>();
      EXPECT_GE(bit, 0) << f.dump();
      EXPECT_LE(bit, 26) << f.dump();  // never 27-30 (exponent) nor the sign
      bits.insert(bit);
    }
  }
  EXPECT_LT(lo, 2.0);  // log-uniform: the whole range is drawn
  EXPECT_GT(hi, 20.0);
  EXPECT_TRUE(bits.count(23) + bits.count(24) + bits.count(25) + bits.count(26) > 0);
  // Same seed without --values: the generic part (kind, ranks, step) is the same, the values not.
  const auto any = draw_faults(b.s, b.text, b.t, kinds, 7, 120);
  int differ = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(any[i].fault["kind"], a[i].fault["kind"]) << i;
    EXPECT_EQ(any[i].fault["step"], a[i].fault["step"]) << i;
    differ += any[i].fault != a[i].fault;
  }
  EXPECT_GT(differ, 100);
  // A half-precision wire: comm flips a finite bit of the fp16 word (mantissa 0-9, exponent
  // bits 10-12).
  const Base h = base(kHalfMse);
  for (const auto& d : draw_faults(h.s, h.text, h.t, {"comm"}, 3, 40, DrawValues::kFinite)) {
    EXPECT_LE(d.fault.at("bit").get<int64_t>(), 12) << d.fault.dump();
    EXPECT_TRUE(d.finite);
  }
}

TEST(CampaignValues, DefaultIsTheAnyDrawAndFiniteMarksWhatIsFiniteByConstruction) {
  const Base b = base(kMlp);
  const auto kinds = campaign_kinds(b.s, b.t, {});
  EXPECT_EQ(kinds, campaign_kinds(b.s, b.t, {}, DrawValues::kAny));
  const auto dflt = draw_faults(b.s, b.text, b.t, kinds, 11, 60);
  const auto any = draw_faults(b.s, b.text, b.t, kinds, 11, 60, DrawValues::kAny);
  int finite = 0, nonfinite = 0;
  for (size_t i = 0; i < dflt.size(); ++i) {
    EXPECT_EQ(dflt[i].fault, any[i].fault) << i;
    const ojson& f = dflt[i].fault;
    const std::string kind = f["kind"];
    bool expect = false;
    if (kind == "tensor" || kind == "batch") {
      expect = f.contains("value") && f["value"].is_number();  // 1e30, not "nan"
    } else if (kind == "bitflip") {
      const int64_t bit = f["bit"];
      expect = bit <= 26 || bit == 31;
    } else if (kind == "comm") {
      expect = f.contains("value") ? f["value"].is_number()
                                   : (f["bit"].get<int64_t>() <= 26 || f["bit"] == 31);
    } else if (kind == "lr" || kind == "state") {
      expect = true;
    }
    EXPECT_EQ(dflt[i].finite, expect) << f.dump();
    (dflt[i].finite ? finite : nonfinite) += 1;
  }
  EXPECT_GT(finite, 0);
  EXPECT_GT(nonfinite, 0);
  EXPECT_EQ(dflt[0].fault.dump(), PINNED_FIRST_DRAW);
}

TEST(CampaignValues, KindsThatCannotBeFiniteOrNonfiniteAreRefusedWithTheReason) {
  const Base b = base(kMlp);
  const auto finite = campaign_kinds(b.s, b.t, {}, DrawValues::kFinite);
  EXPECT_EQ(finite, (std::vector<std::string>{"bitflip", "comm", "crash", "hang", "lr", "state",
                                              "tensor"}));
  const auto nonfinite = campaign_kinds(b.s, b.t, {}, DrawValues::kNonfinite);
  EXPECT_EQ(nonfinite, (std::vector<std::string>{"batch", "comm", "crash", "hang", "tensor"}));
  auto error = [&](const std::vector<std::string>& wanted, DrawValues v) {
    try {
      campaign_kinds(b.s, b.t, wanted, v);
    } catch (const CampaignError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error({"batch"}, DrawValues::kFinite),
            "--kinds: batch: --values finite: its corruptions write NaN or Inf into the batch or "
            "make 0/0 (constant_column, empty_mask); draw it with --values any or nonfinite");
  EXPECT_EQ(error({"bitflip"}, DrawValues::kNonfinite),
            "--kinds: bitflip: --values nonfinite: a bit flip makes NaN or Inf only of some "
            "values (bit 30 of |x| in [1, 2)); draw it with --values any or finite");
  // Nonfinite tensor values are NaN and Inf only, never 1e30.
  for (const auto& d : draw_faults(b.s, b.text, b.t, {"tensor"}, 5, 40, DrawValues::kNonfinite)) {
    EXPECT_TRUE(d.fault.at("value").is_string()) << d.fault.dump();
    EXPECT_FALSE(d.finite);
  }
  // A slow fault slows a rank and is not finite (it writes no number).
  for (const auto& d : draw_faults(b.s, b.text, b.t, campaign_kinds(b.s, b.t, {"slow"}), 5, 4)) {
    EXPECT_TRUE(d.slows);
    EXPECT_FALSE(d.finite);
  }
}

TEST(CampaignValues, OptionParsesTheThreeWordsAndTheCommandRefusesAnyOther) {
  EXPECT_EQ(parse_values_option("finite"), DrawValues::kFinite);
  EXPECT_EQ(parse_values_option("nonfinite"), DrawValues::kNonfinite);
  EXPECT_EQ(parse_values_option("any"), DrawValues::kAny);
  EXPECT_THROW(parse_values_option("Finite"), CampaignError);
  const std::string bin = NANCHAOS_BINARY;
  const std::string dir = test_util::scratch_dir("nanchaos-test", "campaign-values");
  const std::string file = test_util::write_file(dir, "mlp.toml", kMlp);
  auto bad = test_util::run_cmd(bin + " campaign " + file + " --faults 2 --values finit --out " +
                                dir + "/v");
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_NE(bad.output.find("nanchaos campaign: error: --values \"finit\": expected finite (a "
                            "factor in [1.01, 100], a mantissa or low exponent bit), nonfinite "
                            "(NaN and Inf only) or any (the default)"),
            std::string::npos)
      << bad.output;
  EXPECT_FALSE(std::filesystem::exists(dir + "/v"));
  auto refused = test_util::run_cmd(
      bin + " campaign " + file + " --faults 2 --values finite --kinds batch --out " + dir + "/b");
  EXPECT_EQ(refused.code, 2) << refused.output;
  EXPECT_NE(refused.output.find("--kinds: batch: --values finite: "), std::string::npos)
      << refused.output;
}

}  // namespace
}  // namespace nanchaos::harness
