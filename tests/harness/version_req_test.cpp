// harness/common/version_req.h: `[job] torch` requirements against torch.__version__ strings.
#include "harness/common/version_req.h"

#include <gtest/gtest.h>

namespace nanchaos {
namespace {

bool Meets(const std::string& req, const std::string& version) {
  std::string why;
  auto r = VersionRequirement::parse(req, &why);
  EXPECT_TRUE(r.has_value()) << req << ": " << why;
  return r && r->satisfied_by(version);
}

TEST(VersionRequirement, TorchVersionsOfBothLanes) {
  EXPECT_TRUE(Meets(">=2.4", "2.15.0+cu132"));
  EXPECT_FALSE(Meets(">=2.4", "1.13.0a0"));
  EXPECT_TRUE(Meets(">=1.13", "1.13.0a0"));  // Debian's pre-release tag is ignored
  EXPECT_TRUE(Meets("<2", "1.13.0a0"));
  EXPECT_FALSE(Meets("<2", "2.15.0+cu132"));
  EXPECT_TRUE(Meets(">=2.4, <3", "2.15.0"));
  EXPECT_FALSE(Meets(">=2.4,<2.10", "2.15.0"));
  EXPECT_TRUE(Meets("", "anything"));
  EXPECT_TRUE(Meets("  ", "1.0"));
}

TEST(VersionRequirement, EqualityIsAPrefixAndCompatibleReleaseFollowsPep440) {
  EXPECT_TRUE(Meets("==2.15", "2.15.0+cu132"));
  EXPECT_TRUE(Meets("==2.15", "2.15.3"));
  EXPECT_FALSE(Meets("==2.1", "2.15.0"));  // numbers, not characters
  EXPECT_TRUE(Meets("!=2.14", "2.15.0"));
  EXPECT_FALSE(Meets("!=2.15", "2.15.1"));
  EXPECT_TRUE(Meets("~=2.4", "2.15.0"));
  EXPECT_FALSE(Meets("~=2.4", "3.0.0"));
  EXPECT_TRUE(Meets("~=2.4.1", "2.4.7"));
  EXPECT_FALSE(Meets("~=2.4.1", "2.5.0"));
  EXPECT_TRUE(Meets(">2", "2.0.1"));
  EXPECT_FALSE(Meets(">2", "2.0.0"));
}

TEST(VersionRequirement, AnUnknownVersionMeetsNoClause) {
  EXPECT_FALSE(Meets(">=1", ""));
  EXPECT_FALSE(Meets(">=1", "unknown"));
}

TEST(VersionRequirement, MalformedRequirementsSayWhichClauseAndWhy) {
  for (const char* bad : {"2.4", ">=", ">=2.x", ">=2.4,", "=>2.4", "~=2", ">=2..4", ">=2.4;<3"}) {
    std::string why;
    EXPECT_FALSE(VersionRequirement::parse(bad, &why).has_value()) << bad;
    EXPECT_NE(why.find("clause"), std::string::npos) << bad << ": " << why;
  }
  std::string why;
  VersionRequirement::parse(">=2.4, <<3", &why);
  EXPECT_NE(why.find("clause 2 \"<<3\""), std::string::npos) << why;
}

TEST(VersionRequirement, ReleaseNumbers) {
  EXPECT_EQ(release_numbers("2.15.0+cu132"), (std::vector<long>{2, 15, 0}));
  EXPECT_EQ(release_numbers("1.13.0a0"), (std::vector<long>{1, 13, 0}));
  EXPECT_EQ(release_numbers("2.6.0.dev20241112"), (std::vector<long>{2, 6, 0}));
  EXPECT_TRUE(release_numbers("v2").empty());
}

// [job] python_packages entries: a name, then an optional requirement; names compare as pip's.
TEST(PackageRequirement, NameThenAnOptionalRequirement) {
  std::string why;
  auto p = PackageRequirement::parse(" lightning >= 2.0, <3 ", &why);
  ASSERT_TRUE(p.has_value()) << why;
  EXPECT_EQ(p->name, "lightning");
  EXPECT_EQ(p->key, "lightning");
  EXPECT_EQ(p->text, "lightning >= 2.0, <3");
  EXPECT_TRUE(p->version.satisfied_by("2.6.6"));
  EXPECT_FALSE(p->version.satisfied_by("1.9.5"));
  EXPECT_FALSE(p->version.satisfied_by("3.0.0"));
  auto bare = PackageRequirement::parse("Pytorch_Lightning", &why);
  ASSERT_TRUE(bare.has_value()) << why;
  EXPECT_TRUE(bare->version.any());
  EXPECT_EQ(bare->key, "pytorch-lightning");
  EXPECT_EQ(normalized_package_name("Foo.__Bar-baz"), "foo-bar-baz");
  EXPECT_EQ(normalized_package_name("pytorch-lightning"),
            normalized_package_name("PyTorch.Lightning"));
  for (const char* bad :
       {"", ">=2", "-lightning", "lightning-", "lightning 2", "lightning[pytorch]",
        "lightning>=2.x", "lightning; python_version>'3'"}) {
    EXPECT_FALSE(PackageRequirement::parse(bad, &why).has_value()) << bad;
  }
  PackageRequirement::parse("lightning>=2,<<3", &why);
  EXPECT_EQ(why.rfind("after the name \"lightning\": clause 2 \"<<3\"", 0), 0u) << why;
}

}  // namespace
}  // namespace nanchaos
