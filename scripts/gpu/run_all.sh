#!/usr/bin/env bash
# Everything the GPU issues (9, 27) measure, in one go, on the GPU machine (carry .deps from scripts/gpu/pack_deps.sh):
#   bash scripts/gpu/run_all.sh [build] [test] [cudatest] [amxtest] [llm] [qlora] [latte] [latte_official] [latte1]
#                               [sana]
#   (no argument: build test llm latte)
# build:    scripts/build_cuda.sh (every target against the machine's CUDA LibTorch, ~200 s on 16 cores;
#           TUNE_BUILD_TARGETS="tune tune-bench test_train test_nn" builds only those);
# test:     the whole CTest suite there (CUDA cases included; video cases skip: no FFmpeg on that machine);
# cudatest: only the CUDA cases ("[cuda]") of test_train, test_nn and test_models (the speed levers' checks on the
#           GPU: the CUDA graph of a whole step against eager steps among them), and the CLI's CUDA cases
#           (cli_cuda_*: device cuda training, --grad inference, fp16 with the loss scaler); CUDATEST_CLI=0 skips
#           those;
# amxtest:  the activation-memory tests of test_recipes ("[memory]": every estimate against the tracked CPU peak)
#           on this host's CPU with LibTorch's own bf16 kernels (TUNE_CPU_GEMM=native) and with tune's choice
#           (unset), beside the fp32-accumulate kernels the suite pins: the GPU machines' hosts have AMX, which no
#           development machine has had since the estimates began following the kernel choice.
# llm:      scripts/bench_gpu.py, tune vs Hugging Face transformers + peft, Llama-3.2-1B shape, seq 2048, the levers
#           alone and together, and Kineto traces of three steps summarised per GPU kernel (profiles/);
# qlora:    scripts/bench_gpu.py's QLoRA rows (tune --quantize-base nf4 vs transformers + peft + bitsandbytes, whose
#           wheel pack_deps.sh puts in .whl: carry it) beside the LoRA rows at batch 1 and 2, and traces of a QLoRA
#           step with the ATen chain and with the opt-in jiterator NF4 kernel (profiles_qlora.txt);
# latte:    scripts/bench_latte.py --xl --device cuda, Latte-XL/2 per checkpointing policy and guided sampling.
# latte_official: scripts/bench_latte_official.py --size xl --device cuda: Latte-XL/2 (16 x 256^2, batch 1), tune
#           against the official class-conditional code itself (Vchitect/Latte models/latte.py, attention 'math' and
#           'flash', with the EMA its train.py keeps), checkpointing off and full. The official code does not travel
#           with tune: LATTE_OFFICIAL names a clone of github.com/Vchitect/Latte (default .whl/latte_official: carry
#           it); its einops from .whl/einops (pack_deps.sh).
# latte1:   Latte-1 text-to-video at its real size (scripts/make_real_size_pipeline.py: random weights, the T5 encoder
#           cut to $LATTE1_TEXT_LAYERS layers, 2 by default: it encodes the prompt once, without gradients, and is
#           freed before denoising, so its depth does not change the denoising peak), then scripts/bench_latte1.py:
#           `tune infer --grad` at 16 x 512^2 with CFG against diffusers' LatteTransformer3DModel with gradients
#           (with and without enable_gradient_checkpointing(); diffusers' wheel from pack_deps.sh in .whl/diffusers:
#           carry .whl/diffusers), and the training step per checkpointing policy (16 x 256^2, batch 1).
# sana:     Sana-1600M (scripts/make_sana_1600m_configs.py's transformer, random weights) at 1024^2, batch 1:
#           scripts/bench_sana.py --size 1600m --device cuda, `tune train` per checkpointing policy against diffusers'
#           SanaTransformer2DModel step (fused AdamW; enable_gradient_checkpointing() for full), the full fine-tune,
#           then LoRA rank 16 (diffusers' base frozen in fp32 as tune's, and in bf16 as its LoRA script casts it),
#           with tune's memory levers beside its defaults (full: ema.decay 0; LoRA: param_dtype bf16);
#           the pipeline, latents and runs in /dev/shm (a full checkpoint is ~19 GB); diffusers as for latte1.
#           SANA_MODES="lora full" changes the order; BENCH_SANA_ARGS (both modes), SANA_FULL_ARGS and SANA_LORA_ARGS
#           add bench_sana.py options ("--policies full --implementations tune-no-ema,pytorch" picks rows).
# Logs and JSON go to $OUT when set (the device tool's output folder), else build-cuda/results. One device call
# runs at most 10 minutes: split the phases over calls (build persists while the machine stays warm).
set -euo pipefail
cd "$(dirname "$0")/../.."
results=${OUT:-build-cuda/results}
mkdir -p "$results"
phases=("$@")
# import_or_install MODULE WHEEL...: the GPU image lacks some references (no package registry there); their wheels
# travel in .whl (pack_deps.sh) and install under /tmp/site.
import_or_install() {
  local module=$1; shift
  python3 -c "import $module" 2>/dev/null && return 0
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$@"
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
}
[[ ${#phases[@]} -gt 0 ]] || phases=(build test llm latte)
for phase in "${phases[@]}"; do
  case $phase in
    build) bash scripts/build_cuda.sh 2>&1 | tee "$results/build.txt" ;;
    test)
      # shellcheck disable=SC1091
      source build-cuda/env.sh
      OMP_WAIT_POLICY=passive ctest --test-dir build-cuda --output-on-failure -j8 >"$results/ctest.txt" 2>&1 || true
      grep -E "tests passed|\(Failed\)|Not Run|Timeout" "$results/ctest.txt" | tail -20 ;;
    cudatest)
      source build-cuda/env.sh
      for test in train nn models; do
        binary=$(find build-cuda/tests -name "test_$test" -type f -perm -u+x | head -n 1)
        [[ -n $binary ]] || { echo "cudatest: test_$test not built" | tee -a "$results/cudatest.txt"; continue; }
        # A failing test is recorded, and the phases after this one still run (set -e would stop the call).
        "$binary" "[cuda]" 2>&1 | tail -n 30 | tee -a "$results/cudatest.txt" ||
          echo "cudatest: test_$test FAILED" | tee -a "$results/cudatest.txt"
      done
      [[ ${CUDATEST_CLI:-1} == 0 ]] ||
        OMP_WAIT_POLICY=passive ctest --test-dir build-cuda -R 'cli_(setup_data|cuda_|latte_t2v_cuda)' --output-on-failure 2>&1 |
          tail -n 30 | tee -a "$results/cudatest.txt" || echo "cudatest: CLI cases FAILED" | tee -a "$results/cudatest.txt" ;;
    amxtest)
      source build-cuda/env.sh
      binary=build-cuda/tests/recipes/test_recipes
      [[ -x $binary ]] || { echo "amxtest: $binary not built (TUNE_BUILD_TARGETS needs test_recipes)"; exit 2; }
      grep -o -m1 -E 'amx_bf16|avx512_bf16' /proc/cpuinfo | tee "$results/amxtest.txt" || true
      for gemm in native auto fp32; do
        echo "TUNE_CPU_GEMM=$gemm" | tee -a "$results/amxtest.txt"
        if [[ $gemm == auto ]]; then
          (unset TUNE_CPU_GEMM; OMP_NUM_THREADS=2 "$binary" "[memory]" 2>&1) | tail -n 40 | tee -a "$results/amxtest.txt" || true
        else
          TUNE_CPU_GEMM=$gemm OMP_NUM_THREADS=2 "$binary" "[memory]" 2>&1 | tail -n 40 | tee -a "$results/amxtest.txt" || true
        fi
      done ;;
    llm)
      source build-cuda/env.sh
      PYTHONUNBUFFERED=1 python3 scripts/bench_gpu.py --tune-bench build-cuda/apps/bench/tune-bench \
        --out "$results/bench_gpu.json" --profile-dir build-cuda/profiles ${BENCH_GPU_ARGS:-} 2>&1 |
        tee "$results/bench_gpu.txt"
      for pair in "lora-on-b1-plain lora-on-b1-chunked" "full-off-b4-all"; do
        traces=()
        for name in $pair; do traces+=("build-cuda/profiles/$name.json"); done
        python3 scripts/bench_profile_summary.py "${traces[@]}" --cat kernel --width 70 --top 30 2>&1 |
          tee -a "$results/profiles.txt" || true
      done ;;
    qlora)
      source build-cuda/env.sh
      import_or_install bitsandbytes .whl/bitsandbytes-*.whl
      PYTHONUNBUFFERED=1 python3 scripts/bench_gpu.py --tune-bench build-cuda/apps/bench/tune-bench \
        --rows qlora-off-b1,qlora-on-b1,qlora-on-b2,qlora-on-b4,lora-on-b1,lora-on-b2 \
        --profiles qlora-on-b1-all,qlora-on-b1-jit --profile-dir build-cuda/profiles \
        --out "$results/bench_qlora.json" ${BENCH_GPU_ARGS:-} 2>&1 | tee "$results/bench_qlora.txt"
      python3 scripts/bench_profile_summary.py build-cuda/profiles/qlora-on-b1-all.json \
        build-cuda/profiles/qlora-on-b1-jit.json --cat kernel --width 70 --top 30 2>&1 |
        tee "$results/profiles_qlora.txt" || true ;;
    latte)
      source build-cuda/env.sh
      PYTHONUNBUFFERED=1 python3 scripts/bench_latte.py --tune build-cuda/apps/tune/tune --xl --device cuda \
        --repeat 1 --steps 3 --sample-steps 4 --policies "off full selective" --out "$results/latte_xl.json" 2>&1 |
        tee "$results/latte_xl.txt" ;;
    latte_official)
      source build-cuda/env.sh
      import_or_install einops .whl/einops/*.whl
      official=${LATTE_OFFICIAL:-.whl/latte_official}
      [[ -f $official/models/latte.py ]] || {
        echo "run_all: latte_official needs the official code: $official/models/latte.py not found (LATTE_OFFICIAL:" \
          "a clone of github.com/Vchitect/Latte)" >&2
        exit 2
      }
      PYTHONUNBUFFERED=1 python3 scripts/bench_latte_official.py --tune build-cuda/apps/tune/tune --size xl \
        --device cuda --repeat 1 --steps 3 --policies off,full --reference official-math,official-flash \
        --official "$official" --out "$results/latte_official_xl.json" ${BENCH_LATTE_OFFICIAL_ARGS:-} 2>&1 |
        tee "$results/latte_official_xl.txt" ;;
    latte1)
      source build-cuda/env.sh
      import_or_install diffusers .whl/diffusers/*.whl
      pipeline=${LATTE1_PIPELINE:-/tmp/latte1-real}
      [[ -d $pipeline ]] || python3 scripts/make_real_size_pipeline.py --out "$pipeline" \
        --text-encoder-layers "${LATTE1_TEXT_LAYERS:-2}" 2>&1 | tail -n 8 | tee "$results/latte1_pipeline.txt"
      PYTHONUNBUFFERED=1 python3 scripts/bench_latte1.py --tune build-cuda/apps/tune/tune --pipeline "$pipeline" \
        --device cuda --out "$results/latte1.json" ${BENCH_LATTE1_ARGS:-} 2>&1 | tee "$results/latte1.txt" ;;
    sana)
      source build-cuda/env.sh
      import_or_install diffusers .whl/diffusers/*.whl
      work=/dev/shm/bench-sana
      mkdir -p "$work" 2>/dev/null && [[ $(df --output=avail -k /dev/shm | tail -n 1) -gt 40000000 ]] ||
        work=/tmp/bench-sana
      for mode in ${SANA_MODES:-full lora}; do
        lora=(); [[ $mode == lora ]] && lora=(--lora-rank 16 --policies off,full)
        mode_args=SANA_${mode^^}_ARGS
        PYTHONUNBUFFERED=1 python3 scripts/bench_sana.py --tune build-cuda/apps/tune/tune --size 1600m \
          --device cuda --threads 8 --repeat 1 --steps ${SANA_STEPS:-5} --policies off,full,selective \
          --work "$work" "${lora[@]}" --out "$results/sana_$mode.json" ${BENCH_SANA_ARGS:-} ${!mode_args:-} 2>&1 |
          tee "$results/sana_$mode.txt"
      done ;;
    *) echo "run_all: unknown phase '$phase' (build, test, cudatest, amxtest, llm, qlora, latte, latte_official, latte1, sana)" >&2; exit 2 ;;
  esac
done
