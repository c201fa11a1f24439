/*
 * The sizing calculator (docs/calculator.md): the arithmetic of the two preflights,
 * runbooks/sglang-hicache-preflight.yaml and runbooks/vllm-offload-preflight.yaml, for
 * numbers the reader types in. No network, no library: it runs from the page on disk.
 *
 * One set of rules: runbook_runner/observe/sizing.py counts the ranks and the pinning
 * factors for the preflights, and tests/test_sizing.py runs this file (under node), the
 * preflights' own expressions and that module on one table of cases
 * (tests/fixtures/sizing/cases.yaml), failing where they differ. Change one, change all.
 */
(function () {
  "use strict";

  var GiB = Math.pow(2, 30);
  var GB = 1e9;
  // PyTorch's pinned allocator rounds each tensor up to a power of two: up to 2x.
  var PINNED_ROUNDING = 2;

  // SGLang's ranks on one host: tp x pp x (dp unless --enable-dp-attention) / nnodes; each
  // rank builds its own host pool. null where the layout cannot be counted.
  function sglangRanks(tp, pp, dp, dpAttention, nnodes) {
    var how = "--tp-size " + tp + " × --pp-size " + pp + " × --dp-size " + dp +
      (dpAttention ? " (DP attention: within TP)" : "") + " / --nnodes " + nnodes;
    if (Math.min(tp, pp, dp, nnodes) < 1) {
      return { count: null, how: how, why: "a size below 1 is no layout SGLang starts" };
    }
    if (dpAttention && tp % dp !== 0) {
      return { count: null, how: how, why: "with --enable-dp-attention, --dp-size must divide --tp-size" };
    }
    var world = tp * pp * (dpAttention ? 1 : dp);
    if (world % nnodes !== 0) {
      return { count: null, how: how, why: world + " ranks do not divide evenly over " + nnodes + " nodes" };
    }
    return { count: world / nnodes, how: how, why: "" };
  }

  // vLLM's workers on one host: tp x pp x dp / nnodes.
  function vllmWorkers(tp, pp, dp, nnodes) {
    var how = "--tensor-parallel-size " + tp + " × --pipeline-parallel-size " + pp +
      " × --data-parallel-size " + dp + (nnodes !== 1 ? " / --nnodes " + nnodes : "");
    if (Math.min(tp, pp, dp, nnodes) < 1) {
      return { count: null, how: how, why: "a size below 1 is no layout vLLM starts" };
    }
    var world = tp * pp * dp;
    if (world % nnodes !== 0) {
      return { count: null, how: how, why: world + " workers do not divide evenly over " + nnodes + " nodes" };
    }
    return { count: world / nnodes, how: how, why: "" };
  }

  // The smaller limit wins: free's figures, or a container's memory limit where one is set.
  function hostLimits(input) {
    var limited = input.limitGiB !== null && input.limitGiB !== undefined;
    return {
      totalBytes: (limited ? Math.min(input.totalGiB, input.limitGiB) : input.totalGiB) * GiB,
      availableBytes: (limited ? Math.min(input.availableGiB, input.limitGiB) : input.availableGiB) * GiB,
    };
  }

  // SGLang --hicache-size / --hicache-ratio: GB (1e9 bytes) PER RANK; SGLang's guard keeps
  // `reserveGiB` free; we keep `headroom` of the host's RAM free as well. The device KV pool
  // is the K + V size SGLang logs: the log says GB but divides by 2^30, so it is GiB.
  // The host pools a rank pins besides --hicache-size, sized by the model's layers, not by a
  // flag (runbook_runner/observe/sizing.py ExtraPool): with any of them, cannot tell.
  var EXTRA_POOLS = {
    draft: "speculative-decoding draft pools (https://github.com/sgl-project/sglang/pull/30581)",
    dsa: "the DSA indexer pool (https://github.com/sgl-project/sglang/pull/29263)",
    hybrid: "hybrid SWA or Mamba state pools (https://github.com/sgl-project/sglang/issues/29034)",
  };

  function sglang(input) {
    var ranks = sglangRanks(input.tp, input.pp, input.dp, input.dpAttention, input.nnodes);
    var host = hostLimits(input);
    var budgetBytes = host.availableBytes - input.reserveGiB * GiB - input.headroom * host.totalBytes;
    if (ranks.count === null) {
      return { cannotTell: true, ranks: null, how: ranks.how, why: ranks.why, budgetBytes: budgetBytes };
    }
    var pools = input.extraPools || "none";
    if (pools !== "none") {
      return {
        cannotTell: true, ranks: ranks.count, how: ranks.how, budgetBytes: budgetBytes,
        why: "each of the " + ranks.count + " ranks also pins " + EXTRA_POOLS[pools] +
          ", beside --hicache-size and sized by the model's layers",
      };
    }
    var kvPoolBytes = input.kvPoolGiB * GiB; // the device KV pool of one rank
    var perRankBytes = input.hicacheSizeGB > 0 ? input.hicacheSizeGB * GB : input.ratio * kvPoolBytes;
    var requestedBytes = ranks.count * perRankBytes;
    return {
      cannotTell: false,
      ranks: ranks.count,
      how: ranks.how,
      perRankBytes: perRankBytes,
      requestedBytes: requestedBytes,
      budgetBytes: budgetBytes,
      maxPerRankGB: Math.max(0, Math.floor(budgetBytes / ranks.count / GB)),
      fits: requestedBytes <= budgetBytes,
      // SGLang's own rule: the host pool should be larger than the device pool (older builds
      // assert it, newer ones warn that L2 is less effective).
      hostAboveDevice: kvPoolBytes > 0 ? perRankBytes > kvPoolBytes : null,
    };
  }

  // vLLM: --cpu-offload-gb and --swap-space are GiB PER GPU, the offloaded weights pinned at
  // up to 2x unless VLLM_WEIGHT_OFFLOADING_DISABLE_PIN_MEMORY=1 (exact buffers);
  // --kv-offloading-size depends on the connector: 'native' holds one engine's total once
  // per data-parallel engine on the host (vLLM divides it by TP x PP only) at up to 2x,
  // 'simple' exactly once per worker (builds before it divided), 'lmcache' cannot be told.
  var KV_FACTOR = { native: PINNED_ROUNDING, simple: 1, lmcache: null };

  // The copies of --kv-offloading-size on this host (observe/sizing.py vllm_kv_copies).
  function vllmKvCopies(path, workers, tp, pp) {
    if (path === "lmcache") return null;
    if (path === "simple") return workers;
    return Math.max(1, Math.floor(workers / (tp * pp)));
  }

  function vllm(input) {
    var workers = vllmWorkers(input.tp, input.pp, input.dp, input.nnodes);
    var host = hostLimits(input);
    var budgetBytes = host.availableBytes - input.headroom * host.totalBytes;
    if (workers.count === null) {
      return { cannotTell: true, gpus: null, how: workers.how, why: workers.why, budgetBytes: budgetBytes };
    }
    var gpus = workers.count;
    var cpuFactor = input.exactPins ? 1 : PINNED_ROUNDING;
    var swapBytes = input.swapGiB * GiB;
    var perGpuBytes = cpuFactor * input.cpuOffloadGiB * GiB + swapBytes;
    var kvBytes = input.kvOffloadGiB * GiB;
    var kvCopies = input.kvOffloadGiB > 0 ? vllmKvCopies(input.path, gpus, input.tp, input.pp) : 1;
    if (kvCopies === null) {
      return {
        cannotTell: true, gpus: gpus, how: workers.how, perGpuBytes: perGpuBytes, budgetBytes: budgetBytes,
        why: "--kv-offloading-backend lmcache: the host pool is LMCache's to size",
      };
    }
    var kvFactor = input.kvOffloadGiB > 0 ? KV_FACTOR[input.path] : PINNED_ROUNDING;
    var kvHostBytes = kvFactor * kvCopies * kvBytes;
    var requestedBytes = gpus * perGpuBytes + kvHostBytes;
    return {
      cannotTell: false,
      gpus: gpus,
      how: workers.how,
      cpuFactor: cpuFactor,
      perGpuBytes: perGpuBytes,
      kvFactor: kvFactor,
      kvCopies: kvCopies,
      kvHostBytes: kvHostBytes,
      requestedBytes: requestedBytes,
      budgetBytes: budgetBytes,
      maxCpuOffloadGiB: Math.max(
        0, Math.floor((budgetBytes - kvHostBytes - gpus * swapBytes) / gpus / cpuFactor / GiB)),
      fits: requestedBytes <= budgetBytes,
    };
  }

  // What the reader typed, checked before any arithmetic: an empty, zero, negative or
  // non-numeric field gets a message, never a verdict ("Infinity GB per rank: fits").
  // kind: "count" (a whole number of 1 or more), "size" (0 or more), "positive" (above 0),
  // "percent" (0 to 90); optional fields may be left empty (null).
  function read(raw, spec) {
    var values = {};
    var errors = [];
    Object.keys(spec).forEach(function (name) {
      var rule = spec[name];
      var text = raw[name] === undefined || raw[name] === null ? "" : String(raw[name]).trim();
      if (rule.kind === "flag") {
        values[name] = text === "true" || text === "on" || text === "1";
        return;
      }
      if (rule.kind === "choice") {
        if (rule.choices.indexOf(text) < 0) {
          errors.push(rule.label + ": choose one of " + rule.choices.join(", "));
        }
        values[name] = text;
        return;
      }
      if (text === "") {
        if (rule.optional) {
          values[name] = null;
        } else {
          errors.push(rule.label + ": enter a number");
        }
        return;
      }
      var value = /^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$/.test(text) ? Number(text) : NaN;
      if (!isFinite(value)) {
        errors.push(rule.label + ": '" + text + "' is not a number");
      } else if (rule.kind === "count" && (value < 1 || Math.floor(value) !== value)) {
        errors.push(rule.label + ": a whole number of 1 or more (got " + text + ")");
      } else if (rule.kind === "whole" && (value < 0 || Math.floor(value) !== value)) {
        errors.push(rule.label + ": a whole number of 0 or more (got " + text + ")");
      } else if (rule.kind === "positive" && value <= 0) {
        errors.push(rule.label + ": more than 0 (got " + text + ")");
      } else if (rule.kind === "size" && value < 0) {
        errors.push(rule.label + ": 0 or more (got " + text + ")");
      } else if (rule.kind === "percent" && (value < 0 || value > 90)) {
        errors.push(rule.label + ": between 0 and 90 (got " + text + ")");
      } else {
        values[name] = value;
      }
    });
    return { values: values, errors: errors };
  }

  var HOST_SPEC = {
    total: { label: "Total RAM", kind: "positive" },
    available: { label: "Available RAM", kind: "positive" },
    limit: { label: "Container memory limit", kind: "positive", optional: true },
    headroom: { label: "Headroom", kind: "percent" },
  };

  var SGLANG_SPEC = Object.assign({
    tp: { label: "--tp-size", kind: "count" },
    pp: { label: "--pp-size", kind: "count" },
    dp: { label: "--dp-size", kind: "count" },
    dp_attention: { label: "--enable-dp-attention", kind: "flag" },
    nnodes: { label: "--nnodes", kind: "count" },
    // SGLang's --hicache-size is an int: a decimal is refused at launch, and here.
    hicache_size: { label: "--hicache-size", kind: "whole" },
    extra_pools: { label: "Host pools besides --hicache-size", kind: "choice", choices: ["none", "draft", "dsa", "hybrid"] },
    ratio: { label: "--hicache-ratio", kind: "size" },
    kv_pool: { label: "Device KV pool of one rank", kind: "size" },
    reserve: { label: "SGLang's reserve", kind: "size" },
  }, HOST_SPEC);

  var VLLM_SPEC = Object.assign({
    tp: { label: "--tensor-parallel-size", kind: "count" },
    pp: { label: "--pipeline-parallel-size", kind: "count" },
    dp: { label: "--data-parallel-size", kind: "count" },
    nnodes: { label: "--nnodes", kind: "count" },
    cpu_offload: { label: "--cpu-offload-gb", kind: "size" },
    exact_pins: { label: "VLLM_WEIGHT_OFFLOADING_DISABLE_PIN_MEMORY=1", kind: "flag" },
    swap: { label: "--swap-space", kind: "size" },
    kv_offload: { label: "--kv-offloading-size", kind: "size" },
    path: { label: "Connector", kind: "choice", choices: ["native", "simple", "lmcache"] },
  }, HOST_SPEC);

  // Free cannot show more available than total: a form that says so holds a typo.
  function checkHost(got) {
    var v = got.values;
    if (!got.errors.length && v.available > v.total) {
      got.errors.push("Available RAM: at most the total (got " + v.available + " GiB of " + v.total + " GiB)");
    }
    return got;
  }

  // The form's text -> the input of sglang() (or the messages that stop it).
  function readSglang(raw) {
    var got = checkHost(read(raw, SGLANG_SPEC));
    var v = got.values;
    if (!got.errors.length && !(v.hicache_size > 0) && !(v.ratio > 0 && v.kv_pool > 0)) {
      got.errors.push("give --hicache-size, or --hicache-ratio and the device KV pool of one rank");
    }
    if (got.errors.length) return { errors: got.errors };
    return {
      errors: [],
      input: {
        tp: v.tp, pp: v.pp, dp: v.dp, dpAttention: v.dp_attention, nnodes: v.nnodes,
        hicacheSizeGB: v.hicache_size, ratio: v.ratio, kvPoolGiB: v.kv_pool, extraPools: v.extra_pools,
        totalGiB: v.total, availableGiB: v.available, limitGiB: v.limit,
        reserveGiB: v.reserve, headroom: v.headroom / 100,
      },
    };
  }

  function readVllm(raw) {
    var got = checkHost(read(raw, VLLM_SPEC));
    if (got.errors.length) return { errors: got.errors };
    var v = got.values;
    return {
      errors: [],
      input: {
        tp: v.tp, pp: v.pp, dp: v.dp, nnodes: v.nnodes, cpuOffloadGiB: v.cpu_offload,
        exactPins: v.exact_pins, swapGiB: v.swap, kvOffloadGiB: v.kv_offload, path: v.path,
        totalGiB: v.total, availableGiB: v.available, limitGiB: v.limit, headroom: v.headroom / 100,
      },
    };
  }

  function fmt(bytes, unit) {
    var value = bytes / (unit === "GB" ? GB : GiB);
    return value.toLocaleString("en-US", { maximumFractionDigits: 1 }) + " " + unit;
  }

  function hostLine(input, r, reserve) {
    var limit = input.limitGiB !== null ? " (container limit " + input.limitGiB + " GiB: the smaller wins)" : "";
    return "may be used: " + fmt(hostLimits(input).availableBytes, "GiB") + " available" + limit +
      (reserve ? " − " + input.reserveGiB + " GiB SGLang keeps free" : "") + " − " +
      input.headroom * 100 + "% of " + fmt(hostLimits(input).totalBytes, "GiB") + " headroom = " +
      fmt(r.budgetBytes, "GiB");
  }

  // The lines the page shows, and the verdict: "fits", "does-not-fit", "cannot-tell", or
  // "refused" (an input the arithmetic must not run on).
  function sglangLines(raw) {
    var got = readSglang(raw);
    if (got.errors.length) return { verdict: "refused", lines: got.errors };
    var input = got.input;
    var r = sglang(input);
    if (r.cannotTell) {
      return {
        verdict: "cannot-tell",
        lines: [
          "ranks on this host: " + r.how + (r.ranks ? " = " + r.ranks : "") + ": " + r.why,
          "verdict: cannot tell",
        ],
      };
    }
    var lines = [
      "ranks on this host: " + r.how + " = " + r.ranks + ", each with its own host pool",
      (input.hicacheSizeGB > 0
        ? "per rank: --hicache-size " + input.hicacheSizeGB + " GB = " + fmt(r.perRankBytes, "GB")
        : "per rank: --hicache-ratio " + input.ratio + " × device KV pool " + input.kvPoolGiB +
          " GiB = " + fmt(r.perRankBytes, "GB")),
      "requested: " + r.ranks + " ranks × " + fmt(r.perRankBytes, "GB") + " = " +
        fmt(r.requestedBytes, "GB") + " (" + fmt(r.requestedBytes, "GiB") + ")",
      hostLine(input, r, true),
      "largest --hicache-size that fits: " + r.maxPerRankGB + " GB per rank",
      r.fits ? "verdict: fits" : "verdict: does NOT fit",
    ];
    if (r.hostAboveDevice === false) {
      lines.push("warning: the host pool of a rank is not larger than its device pool (SGLang's rule)");
    }
    return { verdict: r.fits ? "fits" : "does-not-fit", lines: lines };
  }

  function vllmLines(raw) {
    var got = readVllm(raw);
    if (got.errors.length) return { verdict: "refused", lines: got.errors };
    var input = got.input;
    var r = vllm(input);
    if (r.cannotTell) {
      var lines = ["workers on this host: " + r.how + (r.gpus ? " = " + r.gpus : "") + ": " + r.why];
      if (input.path === "lmcache") {
        lines.push("size LMCache's max_local_cpu_size (GiB) × workers instead (it is per worker; " +
          "LMCache #2901; for an MLA model with save_only_first_rank only the first rank does).");
      }
      lines.push("verdict: cannot tell");
      return { verdict: "cannot-tell", lines: lines };
    }
    return {
      verdict: r.fits ? "fits" : "does-not-fit",
      lines: [
        "workers on this host: " + r.how + " = " + r.gpus,
        "per GPU: " + r.cpuFactor + " × --cpu-offload-gb " + input.cpuOffloadGiB + " GiB" +
          (r.cpuFactor > 1 ? " (pinned allocator rounding)" : " (exact buffers)") +
          " + --swap-space " + input.swapGiB + " GiB = " + fmt(r.perGpuBytes, "GiB"),
        "KV offload: " + r.kvFactor + " × " + r.kvCopies + " × " + input.kvOffloadGiB +
          " GiB (connector: " + input.path + ", held " + r.kvCopies + " time(s)) = " +
          fmt(r.kvHostBytes, "GiB"),
        "requested: " + r.gpus + " GPUs × " + fmt(r.perGpuBytes, "GiB") + " + " +
          fmt(r.kvHostBytes, "GiB") + " = " + fmt(r.requestedBytes, "GiB"),
        hostLine(input, r, false),
        "largest --cpu-offload-gb that fits: " + r.maxCpuOffloadGiB + " GiB per GPU",
        r.fits ? "verdict: fits" : "verdict: does NOT fit",
      ],
    };
  }

  function rawOf(form) {
    var raw = {};
    Array.prototype.forEach.call(form.elements, function (field) {
      if (!field.name) return;
      raw[field.name] = field.type === "checkbox" ? String(field.checked) : field.value;
    });
    return raw;
  }

  function show(form, result) {
    var out = form.querySelector("output");
    out.textContent = result.lines.join("\n");
    out.setAttribute("data-verdict", result.verdict);
  }

  var api = {
    sglang: sglang,
    vllm: vllm,
    sglangRanks: sglangRanks,
    vllmWorkers: vllmWorkers,
    readSglang: readSglang,
    readVllm: readVllm,
    sglangLines: sglangLines,
    vllmLines: vllmLines,
    vllmKvCopies: vllmKvCopies,
    KV_FACTOR: KV_FACTOR,
  };
  if (typeof module !== "undefined" && module.exports) {
    module.exports = api;
  }
  if (typeof document !== "undefined") {
    var wire = function () {
      [["sizing-sglang", sglangLines], ["sizing-vllm", vllmLines]].forEach(function (pair) {
        var form = document.getElementById(pair[0]);
        if (!form) return;
        var run = function (event) {
          if (event) event.preventDefault();
          show(form, pair[1](rawOf(form)));
        };
        form.addEventListener("submit", run);
        form.addEventListener("input", function () { run(); });
        form.addEventListener("change", function () { run(); });
        run();
      });
    };
    if (document.readyState === "loading") {
      document.addEventListener("DOMContentLoaded", wire);
    } else {
      wire();
    }
  }
})();
