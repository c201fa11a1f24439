/*
 * The sizing calculator (docs/calculator.md): the arithmetic of the two preflights,
 * runbooks/sglang-hicache-preflight.yaml and runbooks/vllm-offload-preflight.yaml, for
 * numbers the reader types in. No network, no library: it runs from the page on disk.
 *
 * One arithmetic: tests/test_calculator.py runs these functions (under node) and the
 * preflights' own `let` expressions on the same table of cases, and fails where they differ.
 * Change one, change the other.
 */
(function () {
  "use strict";

  var GiB = Math.pow(2, 30);
  var GB = 1e9;

  // SGLang --hicache-size / --hicache-ratio: GB (1e9 bytes) PER RANK; SGLang's guard keeps
  // `reserveGiB` free; we keep `headroom` of the host's RAM free as well.
  function sglang(input) {
    var ranks = input.ranks;
    var kvPoolBytes = input.kvPoolGB * GB; // the device KV pool of one rank
    var perRankBytes = input.hicacheSizeGB > 0 ? input.hicacheSizeGB * GB : input.ratio * kvPoolBytes;
    var requestedBytes = ranks * perRankBytes;
    var budgetBytes =
      input.availableGiB * GiB - input.reserveGiB * GiB - input.headroom * input.totalGiB * GiB;
    var maxPerRankGB = Math.max(0, Math.floor(budgetBytes / ranks / GB));
    return {
      perRankBytes: perRankBytes,
      requestedBytes: requestedBytes,
      budgetBytes: budgetBytes,
      maxPerRankGB: maxPerRankGB,
      fits: requestedBytes <= budgetBytes,
      // SGLang's own rule: the host pool should be larger than the device pool (older builds
      // assert it, newer ones warn that L2 is less effective).
      hostAboveDevice: kvPoolBytes > 0 ? perRankBytes > kvPoolBytes : null,
    };
  }

  // vLLM: --cpu-offload-gb and --swap-space are GiB PER GPU; --kv-offloading-size depends on
  // the connector: 'native' pins it once in total, 'simple' (VLLM_USE_SIMPLE_KV_OFFLOAD=1)
  // once per worker on builds before the connector divided it, 'lmcache' cannot be told.
  var EACH_WORKER = { native: 0, simple: 1, lmcache: null };

  function vllm(input) {
    var gpus = input.tp * input.pp;
    var perGpuBytes = (input.cpuOffloadGiB + input.swapGiB) * GiB;
    var kvBytes = input.kvOffloadGiB * GiB;
    var eachWorker = input.kvOffloadGiB > 0 ? EACH_WORKER[input.path] : 0;
    var budgetBytes = input.availableGiB * GiB - input.headroom * input.totalGiB * GiB;
    if (eachWorker === null || eachWorker === undefined) {
      return { cannotTell: true, gpus: gpus, perGpuBytes: perGpuBytes, budgetBytes: budgetBytes };
    }
    var kvCopies = 1 + eachWorker * (gpus - 1);
    var kvHostBytes = input.kvFactor * kvCopies * kvBytes;
    var requestedBytes = gpus * perGpuBytes + kvHostBytes;
    return {
      cannotTell: false,
      gpus: gpus,
      perGpuBytes: perGpuBytes,
      kvCopies: kvCopies,
      kvHostBytes: kvHostBytes,
      requestedBytes: requestedBytes,
      budgetBytes: budgetBytes,
      fits: requestedBytes <= budgetBytes,
    };
  }

  function fmt(bytes, unit) {
    var value = bytes / (unit === "GB" ? GB : GiB);
    return value.toLocaleString("en-US", { maximumFractionDigits: 1 }) + " " + unit;
  }

  function number(form, name) {
    var field = form.elements[name];
    var value = parseFloat(field.value);
    return isFinite(value) ? value : 0;
  }

  function show(form, lines, ok) {
    var out = form.querySelector("output");
    out.textContent = lines.join("\n");
    out.setAttribute("data-verdict", ok === null ? "cannot-tell" : ok ? "fits" : "does-not-fit");
  }

  function sglangForm(form) {
    var input = {
      ranks: number(form, "ranks"),
      hicacheSizeGB: number(form, "hicache_size"),
      ratio: number(form, "ratio"),
      kvPoolGB: number(form, "kv_pool"),
      totalGiB: number(form, "total"),
      availableGiB: number(form, "available"),
      reserveGiB: number(form, "reserve"),
      headroom: number(form, "headroom") / 100,
    };
    var r = sglang(input);
    var lines = [
      (input.hicacheSizeGB > 0
        ? "per rank: --hicache-size " + input.hicacheSizeGB + " GB = " + fmt(r.perRankBytes, "GB")
        : "per rank: --hicache-ratio " + input.ratio + " × device KV pool " + input.kvPoolGB +
          " GB = " + fmt(r.perRankBytes, "GB")),
      "requested: " + input.ranks + " ranks × " + fmt(r.perRankBytes, "GB") + " = " +
        fmt(r.requestedBytes, "GB") + " (" + fmt(r.requestedBytes, "GiB") + ")",
      "may be used: " + input.availableGiB + " GiB available − " + input.reserveGiB +
        " GiB SGLang keeps free − " + input.headroom * 100 + "% of " + input.totalGiB +
        " GiB headroom = " + fmt(r.budgetBytes, "GiB"),
      "largest --hicache-size that fits: " + r.maxPerRankGB + " GB per rank",
      r.fits ? "verdict: fits" : "verdict: does NOT fit",
    ];
    if (r.hostAboveDevice === false) {
      lines.push("warning: the host pool of a rank is not larger than its device pool (SGLang's rule)");
    }
    show(form, lines, r.fits);
  }

  function vllmForm(form) {
    var input = {
      tp: number(form, "tp"),
      pp: number(form, "pp"),
      cpuOffloadGiB: number(form, "cpu_offload"),
      swapGiB: number(form, "swap"),
      kvOffloadGiB: number(form, "kv_offload"),
      path: form.elements.path.value,
      kvFactor: number(form, "kv_factor"),
      totalGiB: number(form, "total"),
      availableGiB: number(form, "available"),
      headroom: number(form, "headroom") / 100,
    };
    var r = vllm(input);
    if (r.cannotTell) {
      show(form, [
        "--kv-offloading-backend lmcache: the host pool is LMCache's (per worker on older vLLM " +
          "builds, LMCache's own server on newer ones): cannot tell from vLLM's flags.",
        "size LMCache's max_local_cpu_size × workers instead (it is per worker).",
      ], null);
      return;
    }
    show(form, [
      "per GPU: (--cpu-offload-gb " + input.cpuOffloadGiB + " + --swap-space " + input.swapGiB +
        ") GiB = " + fmt(r.perGpuBytes, "GiB") + " (a ceiling: weights offloaded up to it)",
      "KV offload: " + input.kvFactor + " × " + r.kvCopies + " × " + input.kvOffloadGiB +
        " GiB (connector: " + input.path + ", pinned " + r.kvCopies + " time(s)) = " +
        fmt(r.kvHostBytes, "GiB"),
      "requested: " + r.gpus + " GPUs × " + fmt(r.perGpuBytes, "GiB") + " + " +
        fmt(r.kvHostBytes, "GiB") + " = " + fmt(r.requestedBytes, "GiB"),
      "may be used: " + input.availableGiB + " GiB available − " + input.headroom * 100 +
        "% of " + input.totalGiB + " GiB headroom = " + fmt(r.budgetBytes, "GiB"),
      r.fits ? "verdict: fits" : "verdict: does NOT fit",
    ], r.fits);
  }

  var api = { sglang: sglang, vllm: vllm, EACH_WORKER: EACH_WORKER };
  if (typeof module !== "undefined" && module.exports) {
    module.exports = api;
  }
  if (typeof document !== "undefined") {
    var wire = function () {
      [["sizing-sglang", sglangForm], ["sizing-vllm", vllmForm]].forEach(function (pair) {
        var form = document.getElementById(pair[0]);
        if (!form) return;
        var run = function (event) {
          if (event) event.preventDefault();
          pair[1](form);
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
