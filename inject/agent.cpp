// The C++ agent of external LibTorch programs; see agent.h. It writes the events the Python
// agent writes (inject/python/nanchaos/agent.py), so the controller and the judge cannot tell
// which one ran, and applies the faults through the same hook layer as the built-in job
// (inject/faults.h): the same elements from the same generator.
#include "inject/agent.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <vector>

#include "harness/common/job_guard.h"
#include "harness/common/proc_status.h"
#include "harness/common/rank_host.h"
#include "harness/common/wire.h"
#include "harness/evidence/event_types.h"
#include "harness/evidence/events.h"
#include "harness/scenario/keys.h"
#include "harness/scenario/plan.h"
#include "harness/scenario/registry.h"
#include "harness/scenario/scenario_schema.h"
#include "harness/tensor/batch.h"
#include "harness/tensor/optim_state.h"
#include "inject/faults.h"
#include "inject/observe.h"

namespace nanchaos {
namespace {

using nlohmann::json;

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

std::optional<harness::WireType> wire_of(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat:
      return harness::WireType::kFp32;
    case torch::kHalf:
      return harness::WireType::kFp16;
    case torch::kBFloat16:
      return harness::WireType::kBf16;
    default:
      return std::nullopt;
  }
}

// The one Agent of this process (two would map the same event log twice: the second's writes
// land past the end the first cut it to, a SIGBUS).
std::atomic<const Agent*> g_agent{nullptr};

}  // namespace

struct Agent::Impl {
  harness::Scenario plan;
  bool dry_run = false;
  std::unique_ptr<harness::EventLog> log;
  /// observed:* detections, from the log alone (observe.h): never given the plan.
  std::unique_ptr<inject::Observer> observer;
  std::unique_ptr<inject::Faults> faults;
  int rank = 0, world = 1;
  torch::nn::Module* model = nullptr;            // only to refuse a second, different model
  torch::optim::Optimizer* optimizer = nullptr;  // read in finish(), never by the destructor
  inject::NamedTensors named_params;             // handles: alive as long as the agent
  std::vector<torch::Tensor> params, buffers;
  // The step clock and this iteration's state.
  int64_t step = -1;
  int64_t high_water = -1;  // the highest step begun: a step at or below it is a re-execution
  bool open = false;
  bool grads_done = false;            // gradients() already applied this iteration's faults
  std::set<std::string> warned;       // each agent_warning once
  torch::Tensor fingerprint0;         // of the parameters at the iteration's start
  std::vector<torch::Tensor> losses;  // detached, read once at the iteration's end
  std::optional<double> first_loss, last_loss, lr_used;
  std::vector<double> lr_restore;
  int64_t steps_done = 0;
  int64_t coll_seq = 0;
  std::set<std::string> probes;
  int exit_code = 0;
  bool finished = false;

  // The first and last element of every parameter (fp64, on its device): what tells an
  // iteration that updated the parameters from one that did not. LibTorch's optimizers write
  // through Tensor::data(), which does not bump the version counters the Python agent reads,
  // and an update with a non-zero gradient changes (nearly) every element.
  torch::Tensor fingerprint() const {
    std::vector<torch::Tensor> ends;
    for (const auto& p : params) {
      if (p.numel() == 0) continue;
      const auto flat = p.detach().reshape({-1});
      ends.push_back(flat.narrow(0, 0, 1).to(torch::kDouble).cpu());
      ends.push_back(flat.narrow(0, flat.numel() - 1, 1).to(torch::kDouble).cpu());
    }
    return ends.empty() ? torch::zeros({0}, torch::kDouble) : torch::cat(ends);
  }

  bool changed_since_start() const {
    const auto now = fingerprint();
    if (!fingerprint0.defined() || now.numel() != fingerprint0.numel()) return true;
    // NaN never equals itself: an update that writes NaN over NaN counts as an update (as the
    // Python agent's version counters would), not as a skip the job never made.
    return !(now == fingerprint0).all().item<bool>();
  }

  // A call the agent cannot honour as made: said once per kind in the log (`agent_warning`,
  // which the judge quotes when an injection then went unverified) and on stderr.
  void warn(const std::string& kind, const std::string& message) {
    if (!warned.insert(kind).second) return;
    log->write("agent_warning",
               {{"rank", rank}, {"step", step}, {"kind", kind}, {"message", message}});
    std::fprintf(stderr, "nanchaos agent: rank %d: warning: %s\n", rank, message.c_str());
  }

  [[noreturn]] void fail(const std::string& reason) {
    log->write("attach_error", {{"rank", rank}, {"reason", reason}});
    throw AttachError("nanchaos: " + reason);
  }

  // What only the Python agent applies (FSDP2's collectives, optimizer state; the loader
  // accepts them for every external job) is refused at attach: this agent sees no reduce-scatter
  // and no all-gather, and LibTorch's optimizers keep their state out of its reach.
  void refuse_python_only(const harness::FaultSpec& f) {
    const harness::FaultKindInfo* info = harness::find_fault_kind(f.kind);
    std::string what = info != nullptr && info->python_only ? info->python_only(f) : "";
    if (what.empty() && f.target && f.target->where == harness::TargetWhere::kOptimizer) {
      what = "target " + f.target->text() + " (optimizer state)";
    }
    if (!what.empty()) {
      fail(
          fmt::format("[[fault]] #{} ({}): {} is applied by the Python agent only; this "
                      "LibTorch job's agent cannot apply it",
                      f.index + 1, f.kind, what));
    }
  }

  // A parameter:/gradient: target that names no parameter is refused at attach, with the
  // model's parameter count, instead of a run ending in "injection not verified".
  void check_targets() {
    for (const auto& f : plan.faults) {
      refuse_python_only(f);
      if (!f.target || (f.target->where != harness::TargetWhere::kParameter &&
                        f.target->where != harness::TargetWhere::kGradient)) {
        continue;
      }
      const std::string& pattern = f.target->pattern;
      bool any = false;
      std::vector<std::string> names;
      for (const auto& [name, p] : named_params) {
        any = any || harness::match_target(pattern, name);
        names.push_back(name);
      }
      if (!any) {
        const std::string near = harness::nearest(pattern, names);
        fail(fmt::format(
            "[[fault]] #{} ({}): target {} matches no parameter of the model ({} parameters; "
            "`nanchaos targets` lists them){}",
            f.index + 1, f.kind, f.target->text(), named_params.size(),
            near.empty()
                ? ""
                : fmt::format(" (did you mean {}:{}?)", to_string(f.target->where), near)));
      }
    }
  }

  void end_iteration() {
    open = false;
    const bool updated = changed_since_start();
    std::optional<double> loss;
    if (!losses.empty()) {
      std::vector<torch::Tensor> flat;
      for (const auto& l : losses) flat.push_back(l.reshape({}).to(torch::kFloat).cpu());
      loss = torch::stack(flat).mean().item<double>();
      losses.clear();
      if (!first_loss) first_loss = loss;
      last_loss = loss;
    }
    std::optional<double> lr = lr_used;
    if (!lr && optimizer && !optimizer->param_groups().empty()) {
      lr = optimizer->param_groups()[0].options().get_lr();
    }
    harness::StepEndEvent end;
    end.step = step;
    end.action = updated ? "update" : "skip";
    // Written even when unknown (null), as the agent always wrote them.
    end.loss = loss.value_or(harness::kNoValue);
    end.lr = lr.value_or(harness::kNoValue);
    harness::write_event(*log, end);
    observer->end_iteration(step, updated);
    steps_done = step + 1;
  }
};

Agent::Agent() {
  const char* plan_text = std::getenv("NANCHAOS_PLAN");
  if (!plan_text || !*plan_text) return;  // not under nanchaos: every call is a no-op
  const char* events = std::getenv("NANCHAOS_EVENTS");
  if (!events || !*events) {
    throw std::runtime_error("nanchaos agent: $NANCHAOS_PLAN is set but $NANCHAOS_EVENTS is not");
  }
  if (const Agent* first = g_agent.load()) {
    const std::string reason =
        "a second nanchaos::Agent was constructed while another exists in this process; "
        "construct one per rank (in main) and pass it where it is needed";
    // Said where the controller reads it, by the first agent's log while it is open (two logs
    // on one file would cut each other's lines), else by one opened for this line.
    const int rank = env_int("RANK", 0);
    if (first->live()) {
      first->impl_->log->write("attach_error", {{"rank", rank}, {"reason", reason}});
    } else {
      harness::EventLog once(events, /*append=*/true);
      once.write("attach_error", {{"rank", rank}, {"reason", reason}});
    }
    throw AttachError("nanchaos agent: " + reason);
  }
  auto impl = std::make_unique<Impl>();
  impl->rank = env_int("RANK", 0);
  impl->world = env_int("WORLD_SIZE", 1);
  impl->log = std::make_unique<harness::EventLog>(events, /*append=*/true);
  impl->observer = std::make_unique<inject::Observer>(*impl->log);
  impl->log->write(
      "agent",
      {{"rank", impl->rank}, {"pid", getpid()}, {"agent", "cpp"}, {"torch", TORCH_VERSION}});
  try {
    const json plan = json::parse(plan_text, nullptr, /*allow_exceptions=*/false);
    if (plan.is_discarded()) throw std::runtime_error("$NANCHAOS_PLAN is not JSON");
    harness::PlanRead read = harness::read_plan(plan, "$NANCHAOS_PLAN");
    impl->plan = std::move(read.scenario);
    impl->dry_run = read.dry_run;
  } catch (const std::exception& e) {
    // Said where the controller reads it (the scenario's error), not only on stderr.
    impl->log->write("attach_error", {{"rank", impl->rank}, {"reason", e.what()}});
    throw std::runtime_error(std::string("nanchaos agent: ") + e.what());
  }
  // This rank ends itself if the controller or the launcher dies (harness/common/job_guard.h).
  harness::start_job_guard(fmt::format("nanchaos rank {}", impl->rank));
  impl->faults = std::make_unique<inject::Faults>(impl->plan, *impl->log, impl->rank, impl->world);
  impl_ = std::move(impl);
  g_agent = this;  // only an agent that opened the log holds the slot
}

bool Agent::live() const { return impl_ && impl_->log; }

Agent::~Agent() {
  // The optimizer (declared after the agent, say) may be gone by now: no digests, so a
  // program that never called finish() is not `recovered`.
  close(impl_ ? impl_->exit_code : 0, /*digests=*/false);
  const Agent* self = this;
  g_agent.compare_exchange_strong(self, nullptr);
}

int Agent::rank() const { return impl_ ? impl_->rank : env_int("RANK", 0); }
int Agent::world_size() const { return impl_ ? impl_->world : env_int("WORLD_SIZE", 1); }
int64_t Agent::steps(int64_t fallback) const { return impl_ ? impl_->plan.job.steps : fallback; }

void Agent::attach(torch::nn::Module& model, torch::optim::Optimizer* optimizer) {
  if (!live()) return;
  Impl& a = *impl_;
  if (a.model && a.model != &model) a.fail("attach() called again with a different model");
  a.model = &model;
  a.optimizer = optimizer;
  a.named_params.clear();
  a.params.clear();
  for (const auto& item : model.named_parameters()) {
    a.named_params.emplace_back(item.key(), item.value());
    a.params.push_back(item.value());
  }
  a.buffers = model.buffers();
  harness::StartEvent start;
  // named_modules() needs the model held by a shared_ptr; the children walk does not.
  std::function<void(const torch::nn::Module&, const std::string&)> walk =
      [&](const torch::nn::Module& m, const std::string& prefix) {
        for (const auto& child : m.named_children()) {
          const std::string name = prefix.empty() ? child.key() : prefix + "." + child.key();
          start.modules.push_back(name);
          walk(*child.value(), name);
        }
      };
  walk(model, "");
  for (const auto& [name, p] : a.named_params) start.parameters.push_back(name);
  a.check_targets();
  start.rank = a.rank;
  start.world = a.world;
  start.pid = getpid();
  start.host = harness::this_host();
  start.external = true;
  start.agent = "cpp";
  start.more = {{"torch", TORCH_VERSION},
                {"optimizer", optimizer ? json::array({"torch::optim"}) : json::array()},
                {"scaler", nullptr},
                {"ddp", false},
                {"micro_batches", a.plan.job.micro_batches}};
  harness::write_event(*a.log, start);
}

void Agent::begin_step(int64_t step) {
  if (!live()) return;
  Impl& a = *impl_;
  if (a.open) a.end_iteration();
  if (a.dry_run && step >= 1) {
    a.log->write("dry_run_done", {{"step", step}});
    a.observer.reset();
    a.log.reset();  // cut to its length
    std::_Exit(0);  // `nanchaos targets` read the names in `start`; nothing else runs
  }
  if (step > a.high_water + 1) {
    a.warn("step_gap", fmt::format("begin_step({}) after step {}: steps {}..{} never began, so "
                                   "faults set at them cannot fire (steps are 0-based and "
                                   "consecutive)",
                                   step, a.high_water, a.high_water + 1, step - 1));
  }
  // A step begun again (the job's own rollback or retry) is a re-execution: persistent faults
  // fire again, one-shot ones do not (inject/faults.h), as in the built-in jobs.
  const bool reexecution = step <= a.high_water;
  a.high_water = std::max(a.high_water, step);
  a.step = step;
  a.open = true;
  a.grads_done = false;
  a.lr_used.reset();
  harness::StepBeginEvent begin;
  begin.step = step;
  harness::write_event(*a.log, begin);
  a.faults->begin_step(step, reexecution);
  a.faults->step_start();
  if (!a.named_params.empty()) {
    torch::NoGradGuard no_grad;
    a.faults->parameters(a.named_params);
  }
  a.fingerprint0 = a.fingerprint();
}

void Agent::batch(torch::Tensor& inputs, torch::Tensor& labels) {
  if (!live() || !impl_->open) return;
  harness::Batch b;
  b.inputs = inputs;
  b.labels = labels;
  impl_->faults->batch(b);
  inputs = b.inputs;
  labels = b.labels;
}

torch::Tensor Agent::probe(const std::string& name, torch::Tensor t) {
  if (!live()) return t;
  Impl& a = *impl_;
  if (a.probes.insert(name).second) a.log->write("probe", {{"name", name}, {"step", a.step}});
  if (!a.open || !torch::GradMode::is_enabled()) return t;  // eval forwards are not steps
  return a.faults->activation(name, std::move(t));
}

torch::Tensor Agent::loss(torch::Tensor loss) {
  if (!live() || !impl_->open) return loss;
  loss = impl_->faults->loss(std::move(loss));
  impl_->losses.push_back(loss.detach());
  return loss;
}

void Agent::gradients() {
  if (!live()) return;
  if (!impl_->open) {
    impl_->warn("outside_step",
                "gradients() called outside an iteration (before begin_step or "
                "after finish): no fault applied");
    return;
  }
  if (impl_->grads_done) {
    impl_->warn("gradients_twice",
                fmt::format("gradients() called twice in step {}: its gradient faults were "
                            "applied once, at the first call",
                            impl_->step));
    return;
  }
  impl_->grads_done = true;
  inject::NamedTensors grads;
  for (const auto& [name, p] : impl_->named_params) {
    if (p.grad().defined()) grads.emplace_back(name, p.grad());
  }
  torch::NoGradGuard no_grad;
  impl_->faults->gradients(grads);
}

bool Agent::collective(const std::string& name, torch::Tensor& buffer,
                       const std::function<bool()>& run) {
  if (!live()) return run();
  Impl& a = *impl_;
  const int64_t seq = a.coll_seq++;
  const auto wire = wire_of(buffer.scalar_type());
  if (a.open) {
    a.faults->before_collective(name);  // a host hang blocks here, before the rank enters
    if (name == "grad_allreduce" && wire) {
      torch::NoGradGuard no_grad;
      if (buffer.is_cuda() || !buffer.is_contiguous()) {
        auto host = buffer.contiguous().cpu();
        a.faults->send_buffer(host.data_ptr(), size_t(host.numel()), *wire);
        buffer.copy_(host);
      } else {
        a.faults->send_buffer(buffer.data_ptr(), size_t(buffer.numel()), *wire);
      }
    }
  }
  fmt::memory_buffer line;
  harness::append_coll_enter(line, harness::now_us(), seq, name, buffer.numel(),
                             c10::toString(buffer.scalar_type()), a.step);
  a.log->write_line(std::string_view(line.data(), line.size()));
  const bool ok = run();
  line.clear();
  harness::append_coll_leave(line, harness::now_us(), seq, name, a.step, ok ? "ok" : "error");
  a.log->write_line(std::string_view(line.data(), line.size()));
  return ok;
}

void Agent::before_optimizer_step() {
  if (!live() || !impl_->open || !impl_->optimizer) return;
  Impl& a = *impl_;
  auto& groups = a.optimizer->param_groups();
  const double factor = a.faults->scale_lr(1.0);
  a.lr_restore.clear();
  if (factor != 1.0) {
    for (auto& g : groups) {
      a.lr_restore.push_back(g.options().get_lr());
      g.options().set_lr(g.options().get_lr() * factor);
    }
  }
  if (!groups.empty()) a.lr_used = groups[0].options().get_lr();
}

void Agent::after_optimizer_step() {
  if (!live() || !impl_->optimizer) return;
  Impl& a = *impl_;
  auto& groups = a.optimizer->param_groups();
  for (size_t i = 0; i < a.lr_restore.size() && i < groups.size(); ++i) {
    groups[i].options().set_lr(a.lr_restore[i]);
  }
  a.lr_restore.clear();
}

void Agent::report_detection(const std::string& detector, const std::string& layer,
                             const std::string& cause, std::optional<int64_t> step) {
  if (!live()) return;
  harness::DetectEvent det;
  det.detector = detector;
  det.step = step.value_or(impl_->step);
  det.layer = layer;
  det.cause = cause;
  det.source = "stack";
  harness::write_event(*impl_->log, det);
}

void Agent::report_decision(const std::string& action, std::optional<int64_t> step) {
  if (!live()) return;
  const int64_t st = step.value_or(impl_->step);
  harness::DecisionEvent dec;
  dec.step = st;
  dec.action = action;
  dec.source = "stack";
  harness::write_event(*impl_->log, dec);
  if (action == "abort") {
    harness::AbortEvent ab;
    ab.step = st;
    ab.reason = "the job's stack decided to abort";
    ab.source = "stack";
    harness::write_event(*impl_->log, ab);
  }
}

void Agent::exception(const std::string& message) {
  if (!live()) return;
  Impl& a = *impl_;
  a.exit_code = 1;
  const std::string msg = message.substr(0, 2000);
  a.log->write("exception", {{"type", "std::exception"}, {"message", msg}, {"step", a.step}});
  a.observer->exception(a.step, msg);
}

void Agent::finish(int exit_code) { close(exit_code, /*digests=*/true); }

void Agent::close(int exit_code, bool digests) {
  if (!live() || impl_->finished) return;
  Impl& a = *impl_;
  a.finished = true;
  if (exit_code != 0) a.exit_code = exit_code;
  if (a.open && a.exit_code == 0) a.end_iteration();
  if (digests && a.model && a.exit_code == 0) {
    const harness::FinalDigests d = harness::final_digests(a.params, a.buffers, a.optimizer);
    harness::FinalEvent fin;
    fin.steps_completed = a.steps_done;
    fin.eval_loss = a.last_loss.value_or(harness::kNoValue);  // null when none or not finite
    fin.initial_eval_loss = a.first_loss.value_or(harness::kNoValue);
    fin.params_hash = d.params_hash;
    fin.optim_hash = d.optim_hash;
    fin.params_finite = d.params_finite;
    harness::write_event(*a.log, fin);
  }
  harness::ExitEvent ex;
  ex.code = a.exit_code;
  ex.vm_hwm_kib = harness::vm_hwm_kib();
  harness::write_event(*a.log, ex);
  a.observer.reset();
  a.log.reset();
}

}  // namespace nanchaos
