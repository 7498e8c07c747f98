// A data-parallel LibTorch training program with its own NaN stack, for nanchaos's external
// jobs (`[job] workload = "external"`): the C++ counterpart of examples/pytorch/train_ddp.py.
//
// Each MPI rank trains the same MLP (fc1 -> relu -> fc2 -> relu -> head, 16 -> 32 -> 32 -> 4, fp32,
// CPU) on its own synthetic batches (32 samples per step, drawn from (rank, step)) and averages
// the gradients with one MPI all-reduce of a flat fp32 buffer per step, as DDP's bucket would.
// The model starts identical on every rank (seeded before it is built, as DDP's broadcast from
// rank 0 would make it). Optimizer: SGD, lr 0.05.
//
// The stack under test (`--stack`):
//   none    no check: a NaN on one rank reaches every rank's parameters through the all-reduce.
//   local   each rank checks its own loss and, when it is non-finite, reports `nan_check`,
//           skips the step and goes on: its peers wait in that step's all-reduce (a blocking
//           MPI_Allreduce, no timeout) and the job deadlocks.
//   synced  one all-reduce (MAX) of two flags after backward, before the gradient all-reduce:
//           this rank's loss is non-finite / some local gradient is non-finite. When any rank
//           raised one, every rank skips the step; the rank whose check fired reports
//           `nan_check` with cause `loss_math` (loss) or `gradient` and the first non-finite
//           parameter in backward order (gradient). After the gradient all-reduce, a non-finite
//           reduced gradient with every rank's local gradients finite is reported by every
//           rank as `comm_corruption` and the update is skipped. Every collective has a
//           deadline (`--collective-timeout-s`, default 5): the watchdog reports `watchdog`
//           (cause `hang`, layer = the collective), decides `abort` and calls MPI_Abort.
//
// Run without nanchaos (every agent call is then a no-op):
//   mpirun -np 2 build/nanchaos-example-libtorch --stack synced --steps 20
// Under nanchaos: scenarios/libtorch/*.toml.
#include <mpi.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "inject/agent.h"

namespace {

struct Options {
  std::string stack = "synced";
  int64_t steps = 20;
  double collective_timeout_s = 5.0;
};

struct NetImpl : torch::nn::Module {
  NetImpl()
      : fc1(register_module("fc1", torch::nn::Linear(16, 32))),
        fc2(register_module("fc2", torch::nn::Linear(32, 32))),
        head(register_module("head", torch::nn::Linear(32, 4))) {}
  // `agent.probe` at each module output: the activation:fc1 / fc2 / head injection points.
  torch::Tensor forward(torch::Tensor x, nanchaos::Agent& agent) {
    x = torch::relu(agent.probe("fc1", fc1(x)));
    x = torch::relu(agent.probe("fc2", fc2(x)));
    return agent.probe("head", head(x));
  }
  torch::nn::Linear fc1, fc2, head;
};
TORCH_MODULE(Net);

/// In-place all-reduce of a contiguous fp32 CPU tensor. `timeout_s` > 0: polled against that
/// deadline (returns false when it passes: the stack's watchdog); otherwise a blocking
/// MPI_Allreduce that waits as long as a peer is missing.
bool allreduce(torch::Tensor& t, MPI_Op op, double timeout_s) {
  if (timeout_s <= 0) {
    return MPI_Allreduce(MPI_IN_PLACE, t.data_ptr<float>(), int(t.numel()), MPI_FLOAT, op,
                         MPI_COMM_WORLD) == MPI_SUCCESS;
  }
  MPI_Request req;
  MPI_Iallreduce(MPI_IN_PLACE, t.data_ptr<float>(), int(t.numel()), MPI_FLOAT, op, MPI_COMM_WORLD,
                 &req);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::microseconds(int64_t(timeout_s * 1e6));
  for (int done = 0;;) {
    MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (done) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

class Trainer {
 public:
  Trainer(const Options& o, nanchaos::Agent& agent, int rank, int world)
      : o_(o), agent_(agent), rank_(rank), world_(world), opt_(init_params(), 0.05) {
    agent_.attach(*net_, &opt_);
    for (const auto& p : net_->named_parameters()) params_.emplace_back(p.key(), p.value());
  }

  /// Returns the process's exit status.
  int run() {
    for (int64_t step = 0; step < o_.steps; ++step) {
      agent_.begin_step(step);
      if (!train_step(step)) return 3;  // the watchdog aborted
    }
    agent_.finish();
    return 0;
  }

 private:
  std::vector<torch::Tensor> init_params() {
    torch::manual_seed(0);  // the same initial model on every rank
    net_ = Net();
    return net_->parameters();
  }

  // One step; false when the watchdog ended the job.
  bool train_step(int64_t step) {
    torch::manual_seed(uint64_t(1000003) * uint64_t(step) + uint64_t(rank_));
    torch::Tensor inputs = torch::randn({32, 16});
    torch::Tensor labels = torch::randint(0, 4, {32});
    agent_.batch(inputs, labels);
    opt_.zero_grad();
    torch::Tensor loss =
        torch::nn::functional::cross_entropy(net_->forward(inputs, agent_), labels);
    loss = agent_.loss(loss);
    const bool loss_bad = !std::isfinite(loss.item<double>());
    if (o_.stack == "local" && loss_bad) {
      agent_.report_detection("nan_check", "", "loss_math");
      agent_.report_decision("skip_step");
      return true;  // this rank alone leaves the step: its peers wait in the all-reduce
    }
    loss.backward();
    agent_.gradients();
    const double timeout = o_.stack == "synced" ? o_.collective_timeout_s : 0.0;
    if (o_.stack == "synced") {
      const std::string bad_layer = first_nonfinite_grad();
      torch::Tensor flags =
          torch::tensor({loss_bad ? 1.0f : 0.0f, bad_layer.empty() ? 0.0f : 1.0f});
      if (!collective("nan_check", flags, MPI_MAX, timeout)) return false;
      if (flags[0].item<float>() > 0 || flags[1].item<float>() > 0) {
        if (loss_bad) {
          agent_.report_detection("nan_check", "", "loss_math");
        } else if (!bad_layer.empty()) {
          agent_.report_detection("nan_check", bad_layer, "gradient");
        }
        agent_.report_decision("skip_step");
        return true;  // every rank skips together
      }
    }
    torch::Tensor flat = flatten_grads();
    if (!collective("grad_allreduce", flat, MPI_SUM, timeout)) return false;
    flat.div_(double(world_));
    unflatten_grads(flat);
    if (o_.stack == "synced") {
      const std::string bad_reduced = first_nonfinite_grad();
      if (!bad_reduced.empty()) {  // every local gradient was finite: the reduction broke it
        agent_.report_detection("nan_check", bad_reduced, "comm_corruption");
        agent_.report_decision("skip_step");
        return true;
      }
    }
    agent_.before_optimizer_step();
    opt_.step();
    agent_.after_optimizer_step();
    return true;
  }

  bool collective(const std::string& name, torch::Tensor& t, MPI_Op op, double timeout) {
    if (agent_.collective(name, t, [&] { return allreduce(t, op, timeout); })) return true;
    // The watchdog: name the collective that timed out, then take the whole job down.
    agent_.report_detection("watchdog", name, "hang");
    agent_.report_decision("abort");
    agent_.finish(3);
    std::fprintf(stderr, "rank %d: watchdog: %s timed out after %.1f s\n", rank_, name.c_str(),
                 o_.collective_timeout_s);
    MPI_Abort(MPI_COMM_WORLD, 3);
    return false;
  }

  // The first parameter (backward order: the reverse of registration) whose gradient holds a
  // NaN or +-inf; "" when all are finite. One reduction per parameter, one host read.
  std::string first_nonfinite_grad() {
    std::vector<torch::Tensor> finite;
    for (auto it = params_.rbegin(); it != params_.rend(); ++it) {
      finite.push_back(torch::isfinite(it->second.grad()).all());
    }
    const auto ok = torch::stack(finite);
    const bool* f = ok.data_ptr<bool>();
    for (size_t i = 0; i < finite.size(); ++i) {
      if (!f[i]) return params_[params_.size() - 1 - i].first;
    }
    return "";
  }

  torch::Tensor flatten_grads() {
    std::vector<torch::Tensor> g;
    for (auto& [name, p] : params_) g.push_back(p.grad().reshape({-1}));
    return torch::cat(g).contiguous();
  }

  void unflatten_grads(const torch::Tensor& flat) {
    int64_t off = 0;
    for (auto& [name, p] : params_) {
      p.mutable_grad().copy_(flat.narrow(0, off, p.numel()).view_as(p));
      off += p.numel();
    }
  }

  Options o_;
  nanchaos::Agent& agent_;
  int rank_, world_;
  Net net_{nullptr};
  torch::optim::SGD opt_;
  std::vector<std::pair<std::string, torch::Tensor>> params_;
};

int usage(const char* why) {
  std::fprintf(stderr,
               "nanchaos-example-libtorch: %s\nusage: nanchaos-example-libtorch [--stack "
               "none|local|synced] [--steps N] [--collective-timeout-s S]\n",
               why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return usage(("missing value for " + a).c_str());
    const std::string v = argv[++i];
    if (a == "--stack") {
      o.stack = v;
      if (o.stack != "none" && o.stack != "local" && o.stack != "synced") {
        return usage(("unknown stack " + v).c_str());
      }
    } else if (a == "--steps") {
      o.steps = std::stoll(v);
    } else if (a == "--collective-timeout-s") {
      o.collective_timeout_s = std::stod(v);
    } else {
      return usage(("unknown option " + a).c_str());
    }
  }
  torch::set_num_threads(1);
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  int code = 0;
  {
    nanchaos::Agent agent;  // a no-op outside nanchaos
    try {
      Trainer trainer(o, agent, rank, world);
      code = trainer.run();
    } catch (const std::exception& e) {
      agent.exception(e.what());
      agent.finish(1);
      std::fprintf(stderr, "rank %d: error: %s\n", rank, e.what());
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
  MPI_Finalize();
  return code;
}
