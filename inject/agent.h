// nanchaos's C++ agent for an external LibTorch training program (SCENARIO_FORMAT.md "External
// jobs"; the Python agent's counterpart, inject/python/nanchaos/agent.py).
//
// A program run as `workload = "external"` links this agent (CMake target `nanchaos::agent`)
// and calls it at its step's points. LibTorch's C++ modules have no forward hooks, so the calls
// are explicit; every one is a no-op, nearly free, when the program does not run under nanchaos
// ($NANCHAOS_PLAN unset), so they can stay in production code:
//
//   nanchaos::Agent agent;                       // reads $NANCHAOS_PLAN, $NANCHAOS_EVENTS
//   agent.attach(*model, &optimizer);            // names for targets; `start`
//   for (int64_t step = 0; step < steps; ++step) {
//     agent.begin_step(step);                    // step-start, parameter faults (crash, hang)
//     agent.batch(inputs, labels);               // batch faults
//     ... x = agent.probe("fc1", model->fc1(x)); // activation faults at module outputs
//     loss = agent.loss(loss);                   // loss faults; the loss for `step_end`
//     loss.backward();
//     agent.gradients();                         // gradient faults, before the all-reduce
//     agent.collective("grad_allreduce", flat, [&] { return allreduce(flat); });
//     agent.before_optimizer_step();  optimizer.step();  agent.after_optimizer_step();
//   }
//   agent.finish();                              // digests (`final`) and `exit`
//
// The job's own stack reports what it caught and did: report_detection(), report_decision().
// The agent also observes, with no call, an iteration that ended without a parameter update
// (`observed:skip`: no parameter's first or last element changed) and an exception the program
// passes to exception() (`observed:exception`). It never adds a check of its own.
//
// Events written (harness/evidence/events.h): agent, start, step_begin, step_end, inject, probe,
// detect, decision, abort, coll_enter, coll_leave, exception, final, exit, attach_error,
// agent_warning {kind, message, step}, dry_run_done, into $NANCHAOS_EVENTS after exec-rank's
// `launch` and `clock` lines. Thread-safety: one training thread per rank calls the agent; one
// Agent per process.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

namespace nanchaos {

/// The agent could not attach: a fault's parameter:/gradient: target matches no parameter of
/// the model, attach() was called twice with different models, or a second Agent was
/// constructed while one exists in the process (one per rank). The reason is also written
/// as `attach_error`, which the controller reports as the scenario's error.
class AttachError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Agent {
 public:
  /// Reads the plan from $NANCHAOS_PLAN and opens $NANCHAOS_EVENTS for appending; rank and
  /// world size from $RANK and $WORLD_SIZE. Inactive (every call a no-op) when $NANCHAOS_PLAN is
  /// unset. Throws std::runtime_error naming the variable when the plan cannot be read or the
  /// event log cannot be opened.
  Agent();
  /// Without finish(): the last `step_end` and `exit`, but no digests (the model and optimizer
  /// may already be destroyed), so the run cannot be judged `recovered`.
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  /// True under nanchaos.
  bool active() const { return impl_ != nullptr; }
  int rank() const;
  int world_size() const;
  /// [job].steps of the scenario ($NANCHAOS_STEPS), or `fallback` when inactive.
  int64_t steps(int64_t fallback) const;

  /// The model (its named_parameters() and named_modules() are the targets' names) and the
  /// optimizer (lr faults, optimizer-state digest). Writes `start`. Throws AttachError (after
  /// writing `attach_error`) for a parameter:/gradient: target that names no parameter.
  void attach(torch::nn::Module& model, torch::optim::Optimizer* optimizer = nullptr);

  /// Starts iteration `step` (0-based, consecutive): ends the previous one (`step_end`), then
  /// the step-start faults (crash, hang) and parameter faults. A step at or below the highest
  /// one begun is a re-execution (the job's own rollback): persistent faults fire again,
  /// one-shot ones do not. A gap (steps never begun) is an `agent_warning`. In a `nanchaos targets`
  /// dry run the process ends here at step 1 (exit status 0, after `dry_run_done`).
  void begin_step(int64_t step);
  /// Batch faults on this rank's batch (`inputs` [B, ...] and `labels` [B, ...]; float or
  /// integer; CPU or CUDA), before the job's own checks. Replaces the tensors it changes.
  void batch(torch::Tensor& inputs, torch::Tensor& labels);
  /// A named injection and probe point (`activation:NAME`): returns `t`, or `t` with the faults
  /// that target NAME applied (out of place, so autograd sees the change).
  torch::Tensor probe(const std::string& name, torch::Tensor t);
  /// Loss faults on the step's loss (a scalar); records it (one host read per iteration, at
  /// its end) for `step_end`.
  torch::Tensor loss(torch::Tensor loss);
  /// Gradient faults on the attached parameters' .grad() (fp32/fp16/bf16, in place), after
  /// backward and before the job reduces them; once per iteration (a second call, or one
  /// outside an iteration, applies nothing and is an `agent_warning`).
  void gradients();
  /// One collective of the job, run by `run` (which returns false when the collective failed:
  /// an error or the job's own timeout): `coll_enter`/`coll_leave`, the hang faults just before
  /// it and the comm faults on `buffer` (this rank's contiguous send buffer, fp32/fp16/bf16 on
  /// the CPU; on CUDA through a host copy). Returns what `run` returned.
  bool collective(const std::string& name, torch::Tensor& buffer, const std::function<bool()>& run);
  /// Before and after the job's optimizer.step(): lr faults scale every param group's lr for
  /// this one step and restore it after.
  void before_optimizer_step();
  void after_optimizer_step();

  /// The job's stack caught something (`detector`: its own name for the check; `step`: the
  /// current iteration when omitted).
  void report_detection(const std::string& detector, const std::string& layer = "",
                        const std::string& cause = "", std::optional<int64_t> step = {});
  /// What the stack did about it: `skip_step`, `rollback`, `lr_backoff`, `abort` or its own word.
  void report_decision(const std::string& action, std::optional<int64_t> step = {});
  /// An exception that ends the program (its what()): `exception` and `observed:exception`.
  void exception(const std::string& message);

  /// Ends the last iteration, writes the digests (`final`, on exit code 0) and `exit`, and
  /// closes the log. Call it while the model and the optimizer are alive. Idempotent.
  void finish(int exit_code = 0);

 private:
  bool live() const;  // under nanchaos and not finished
  void close(int exit_code, bool digests);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace nanchaos
