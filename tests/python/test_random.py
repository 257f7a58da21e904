"""Random numbers on the device: reproducible under seeding, with the right
distributions (checked with simple statistics on large samples)."""

import math

import pytest
import torch

N = 200_000


def seeded(fn, seed=1234):
    torch.manual_seed(seed)
    return fn()


SAMPLERS = {
    "rand": lambda: torch.rand(N, device="tpu"),
    "randn": lambda: torch.randn(N, device="tpu"),
    "randint": lambda: torch.randint(3, 17, (N,), device="tpu"),
    "uniform_": lambda: torch.empty(N, device="tpu").uniform_(-2, 5),
    "normal_": lambda: torch.empty(N, device="tpu").normal_(3, 0.5),
    "bernoulli_": lambda: torch.empty(N, device="tpu").bernoulli_(0.3),
    "bernoulli": lambda: torch.bernoulli(torch.full((N,), 0.7, device="tpu")),
    "exponential_": lambda: torch.empty(N, device="tpu").exponential_(2.0),
    "dropout": lambda: torch.nn.functional.dropout(torch.ones(N, device="tpu"), 0.25),
    "randperm": lambda: torch.randperm(1000, device="tpu"),
    "multinomial": lambda: torch.multinomial(torch.tensor([0.1, 0.2, 0.7], device="tpu"), N, True),
    "_standard_gamma": lambda: torch._standard_gamma(torch.full((N,), 0.7, device="tpu")),
    "poisson": lambda: torch.poisson(torch.full((N,), 12.0, device="tpu")),
    "binomial": lambda: torch.binomial(torch.full((N,), 30.0, device="tpu"), torch.full((N,), 0.4, device="tpu")),
    "_sample_dirichlet": lambda: torch._sample_dirichlet(torch.full((N // 4, 4), 0.5, device="tpu")),
}


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_seeding_reproduces_and_streams_differ(name):
    a = seeded(SAMPLERS[name]).cpu()
    b = seeded(SAMPLERS[name]).cpu()
    c = seeded(SAMPLERS[name], seed=99).cpu()
    assert a.device.type == "cpu"
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    # two draws in a row differ
    torch.manual_seed(5)
    assert not torch.equal(SAMPLERS[name]().cpu(), SAMPLERS[name]().cpu())


def close(value, expected, tol):
    assert abs(value - expected) < tol, (value, expected)


def test_uniform_statistics():
    x = seeded(lambda: torch.empty(N, device="tpu").uniform_(-2, 5)).cpu().double()
    assert x.min() >= -2 and x.max() < 5
    close(x.mean().item(), 1.5, 0.03)
    close(x.var().item(), 49 / 12, 0.05)
    u = seeded(lambda: torch.rand(N, device="tpu", dtype=torch.bfloat16)).cpu()
    assert u.min() >= 0 and u.max() < 1
    d = seeded(lambda: torch.rand(N, device="tpu", dtype=torch.float64)).cpu()
    close(d.mean().item(), 0.5, 0.005)


def test_normal_statistics():
    x = seeded(lambda: torch.empty(N, device="tpu").normal_(3, 0.5)).cpu().double()
    close(x.mean().item(), 3.0, 0.01)
    close(x.std().item(), 0.5, 0.01)
    z = seeded(lambda: torch.randn(N, device="tpu")).cpu().double()
    close(((z > 1.96).double().mean()).item(), 0.025, 0.003)
    assert torch.isfinite(z).all()
    m = torch.normal(torch.tensor([0.0, 10.0], device="tpu").repeat(N // 2), 1.0).cpu()
    close(m[1::2].mean().item(), 10.0, 0.02)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_samplers_from_an_open_interval_never_reach_its_ends(dtype):
    # A uniform in (0, 1) made by adding half a step to a [0, 1) grid rounds
    # to 1 at the top of float32's grid (about once in 2^24 draws): randn
    # gave inf there, geometric_ 0, exponential_ 0. 2^25 draws of each.
    n = 1 << 25
    z = seeded(lambda: torch.randn(n, device="tpu", dtype=dtype), seed=0).cpu()
    assert torch.isfinite(z).all()
    # Every dtype draws from float32's grid and rounds the normal, so the
    # tails of half-precision normals are float32's, not cut at 2.7.
    assert z.abs().max().item() > 5
    assert z.max().item() == -z.min().item()  # the draws are symmetric about 0
    g = seeded(lambda: torch.empty(n, device="tpu", dtype=dtype).geometric_(0.5), seed=1).cpu()
    assert g.min().item() >= 1
    e = seeded(lambda: torch.empty(n, device="tpu", dtype=dtype).exponential_(1.0), seed=2).cpu()
    assert torch.isfinite(e).all() and e.min().item() > 0


def test_integer_and_bernoulli_statistics():
    r = seeded(lambda: torch.randint(3, 17, (N,), device="tpu")).cpu()
    assert r.dtype == torch.int64 and r.min() == 3 and r.max() == 16
    counts = torch.bincount(r - 3)
    assert counts.min() > N / 14 * 0.9
    b = seeded(lambda: torch.empty(N, device="tpu").bernoulli_(0.3)).cpu()
    assert set(b.unique().tolist()) == {0.0, 1.0}
    close(b.mean().item(), 0.3, 0.01)
    e = seeded(lambda: torch.empty(N, device="tpu").exponential_(2.0)).cpu().double()
    assert e.min() >= 0
    close(e.mean().item(), 0.5, 0.01)


def test_dropout_keeps_expectation_and_masks():
    y = seeded(lambda: torch.nn.functional.dropout(torch.ones(N, device="tpu"), 0.25)).cpu()
    kept = y != 0
    close(kept.double().mean().item(), 0.75, 0.01)
    assert torch.allclose(y[kept], torch.tensor(1 / 0.75))
    x = torch.randn(100, device="tpu")
    assert torch.equal(torch.nn.functional.dropout(x, 0.5, training=False).cpu(), x.cpu())


def test_randperm_and_multinomial():
    p = seeded(lambda: torch.randperm(1000, device="tpu")).cpu()
    assert torch.equal(p.sort().values, torch.arange(1000))
    m = seeded(lambda: torch.multinomial(torch.tensor([0.1, 0.2, 0.7], device="tpu"), N, True)).cpu()
    freq = torch.bincount(m, minlength=3).double() / N
    assert torch.allclose(freq, torch.tensor([0.1, 0.2, 0.7], dtype=torch.float64), atol=0.01)
    w = seeded(lambda: torch.multinomial(torch.tensor([[1.0, 0, 3, 2]] * 4, device="tpu"), 3)).cpu()
    for row in w:
        assert len(set(row.tolist())) == 3 and 1 not in row.tolist()


def test_rng_state_round_trip_replays_a_sequence():
    torch.tpu.manual_seed(11)
    state = torch.tpu.get_rng_state()
    first = [torch.randn(4, device="tpu").cpu() for _ in range(3)]
    torch.tpu.set_rng_state(state)
    again = [torch.randn(4, device="tpu").cpu() for _ in range(3)]
    for a, b in zip(first, again):
        assert torch.equal(a, b)


def test_generator_objects():
    g1 = torch.Generator(device="tpu").manual_seed(3)
    g2 = torch.Generator(device="tpu").manual_seed(3)
    a = torch.rand(8, device="tpu", generator=g1).cpu()
    b = torch.rand(8, device="tpu", generator=g2).cpu()
    assert torch.equal(a, b)
    assert not torch.equal(torch.rand(8, device="tpu", generator=g1).cpu(), a)


def _same_distribution(got, want, alpha_c=2.23):
    """Two-sample Kolmogorov-Smirnov: the largest gap between the empirical
    CDFs below the critical value (2.23: a 1e-4 false-alarm rate; the seeds
    are fixed, so the test is deterministic)."""
    got, want = got.double().flatten().sort().values, want.double().flatten().sort().values
    both = torch.cat([got, want]).unique()
    gap = (torch.searchsorted(got, both, right=True) / got.numel()
           - torch.searchsorted(want, both, right=True) / want.numel()).abs().max().item()
    n, m = got.numel(), want.numel()
    return gap, alpha_c * math.sqrt((n + m) / (n * m))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_gamma_poisson_binomial_and_dirichlet_follow_cpus_distributions(dtype):
    """torch.distributions' Gamma, Beta, Chi2, StudentT, Dirichlet, Poisson
    and Binomial draw through these: each distribution equals CPU's (two-sample
    KS against CPU's own sampler, small and large parameters, both sides of
    the boosted and the rejection methods' switches)."""
    n = 20_000
    for a in (0.05, 0.5, 1.0, 3.0, 40.0):
        alpha = torch.full((n,), a, dtype=dtype)
        got = seeded(lambda: torch._standard_gamma(alpha.to("tpu"))).cpu()
        assert got.dtype == dtype and bool((got > 0).all())
        gap, crit = _same_distribution(got, seeded(lambda: torch._standard_gamma(alpha)))
        assert gap < crit, ("gamma", a, gap, crit)
    for rate in (0.3, 4.0, 9.99, 10.0, 60.0, 1000.0):
        lam = torch.full((n,), rate, dtype=dtype)
        got = seeded(lambda: torch.poisson(lam.to("tpu"))).cpu()
        assert bool((got == got.round()).all() and (got >= 0).all())
        gap, crit = _same_distribution(got, seeded(lambda: torch.poisson(lam)))
        assert gap < crit, ("poisson", rate, gap, crit)
        assert abs(got.mean().item() - rate) < 5 * math.sqrt(rate / n)
    for count, prob in ((5.0, 0.3), (100.0, 0.05), (100.0, 0.2), (1000.0, 0.5), (50.0, 0.9), (30.0, 0.95)):
        cs, ps = torch.full((n,), count, dtype=dtype), torch.full((n,), prob, dtype=dtype)
        got = seeded(lambda: torch.binomial(cs.to("tpu"), ps.to("tpu"))).cpu()
        assert bool((got == got.round()).all() and (got >= 0).all() and (got <= count).all())
        gap, crit = _same_distribution(got, seeded(lambda: torch.binomial(cs, ps)))
        assert gap < crit, ("binomial", count, prob, gap, crit)
    conc = torch.tensor([0.1, 1.0, 5.0], dtype=dtype).expand(n, 3).contiguous()
    got = seeded(lambda: torch._sample_dirichlet(conc.to("tpu"))).cpu()
    want = seeded(lambda: torch._sample_dirichlet(conc))
    torch.testing.assert_close(got.sum(-1), torch.ones(n, dtype=dtype))
    for i in range(3):
        gap, crit = _same_distribution(got[:, i], want[:, i])
        assert gap < crit, ("dirichlet", i, gap, crit)


def test_gamma_and_poisson_edge_parameters_and_layouts():
    """Zero parameters give CPU's values (gamma: the smallest normal float,
    as CPU clamps; Poisson: 0; binomial: 0, or the count for prob 1; NaN
    for a NaN prob); a negative shape, on which CPU's sampler
    never returns, gives NaN; results are contiguous as CPU's, also for a
    transposed input; empty inputs give empty results."""
    a = torch.tensor([0.0, -1.0, 2.0], device="tpu")
    g = torch._standard_gamma(a).cpu()
    assert g[0].item() == torch.finfo(torch.float32).tiny and math.isnan(g[1].item()) and g[2].item() > 0
    assert torch.poisson(torch.zeros(5, device="tpu")).cpu().eq(0).all()
    counts, probs = torch.tensor([0.0, 10.0, 10.0, 5.0]), torch.tensor([0.5, 0.0, 1.0, float("nan")])
    got = torch.binomial(counts.to("tpu"), probs.to("tpu")).cpu()
    assert got[:3].tolist() == [0.0, 0.0, 10.0] and math.isnan(got[3].item())
    t = torch.full((4, 6), 2.0).t()
    for f in (torch._standard_gamma, torch.poisson, torch._sample_dirichlet, lambda x: torch.binomial(x, x / 4)):
        assert f(t.to("tpu")).stride() == f(t).stride()
        assert f(torch.empty(0, 3, device="tpu")).shape == (0, 3)
    d = torch.distributions
    x = torch.full((3,), 2.0, device="tpu")
    for dist in (d.Gamma(x, x), d.Beta(x, x), d.Dirichlet(x), d.Chi2(x), d.StudentT(x), d.Poisson(x),
                 d.Binomial(10, x / 4)):
        s = dist.sample((5,))
        assert s.device.type == "tpu" and bool(torch.isfinite(s).all())


def test_compiled_samplers_draw_what_eager_draws_from_the_first_call():
    """After torch.manual_seed, a compiled function's first call (traced and
    captured) and its later ones draw what eager draws (binomial and
    _sample_dirichlet have no meta kernel in PyTorch: tracing them must not
    run them on the device)."""
    a, c, p = (torch.full((2, 4), v, device="tpu") for v in (2.0, 10.0, 0.3))
    for fn in (lambda: torch._standard_gamma(a), lambda: torch.poisson(a), lambda: torch.binomial(c, p),
               lambda: torch._sample_dirichlet(a)):
        compiled = torch.compile(fn, backend="tpu")
        want = seeded(fn).cpu()
        for _ in range(2):
            assert torch.equal(seeded(compiled).cpu(), want)


def _gamma_grad_series(a: float, x: float) -> float:
    """dx/dalpha of a Gamma(a) sample x at fixed CDF, by the incomplete
    gamma function's series differentiated term by term (float64)."""
    if x <= 0:
        return 0.0
    r, lx = x / a, math.log(x)
    psi = torch.special.digamma(torch.tensor(a + 1.0, dtype=torch.float64)).item()
    s, n = r * (lx - psi), 0
    while True:
        n += 1
        r *= x / (a + n)
        psi += 1.0 / (a + n)
        t = r * (lx - psi)
        s += t
        if abs(t) < 1e-17 * abs(s) and x / (a + n) < 1:
            return -s


def test_gamma_rsample_gradient_is_the_exact_reparameterized_one():
    """_standard_gamma_grad (the backward of Gamma, Chi2 rsample): float64
    equal to the differentiated series to 1e-10 relative, and within CPU's
    own approximations' error (about 1e-3 relative at worst); gradients flow
    through Gamma.rsample."""
    g = torch.Generator().manual_seed(0)
    for a in (0.01, 0.5, 1.0, 5.0, 20.0, 1000.0):
        alpha = torch.full((200,), a, dtype=torch.float64)
        x = torch._standard_gamma(alpha, generator=g)
        got = torch._standard_gamma_grad(alpha.to("tpu"), x.to("tpu")).cpu()
        want = torch.tensor([_gamma_grad_series(a, v) for v in x.tolist()], dtype=torch.float64)
        torch.testing.assert_close(got, want, rtol=1e-10, atol=0)
        torch.testing.assert_close(got, torch._standard_gamma_grad(alpha, x), rtol=5e-3, atol=0)
    alpha = torch.full((4000,), 3.0, device="tpu", requires_grad=True)
    torch.manual_seed(0)
    torch.distributions.Gamma(alpha, torch.ones(4000, device="tpu")).rsample().mean().backward()
    assert abs(alpha.grad.sum().item() - 1.0) < 0.05  # E[dx/dalpha] = 1 for a unit rate


def _dirichlet_grad_series(x: float, a: float, total: float) -> float:
    """d x / d a of x ~ Beta(a, total - a) at fixed CDF and fixed b, over
    1 - x (what torch.distributions' Dirichlet backward takes), by the
    incomplete beta function's series (in 1 - x with the shapes swapped past
    (a + 1) / (a + b + 2)), float64."""
    def psi(v):
        return torch.special.digamma(torch.tensor(v, dtype=torch.float64)).item()

    b = total - a
    swap = x > (a + 1) / (a + b + 2)
    p, q, z = (b, a, 1 - x) if swap else (a, b, x)
    s, t, dn, en, td, te, n = 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0
    while True:
        n += 1
        dn += 1.0 / (p + q + n - 1) - 1.0 / (p + n)
        en += 1.0 / (p + q + n - 1)
        t *= z * (p + q + n - 1) / (p + n)
        s, td, te = s + t, td + t * dn, te + t * en
        if t < 1e-17 * s and z * (p + q + n) / (p + n + 1) < 1:
            break
    if not swap:
        return -(z / p) * (s * (math.log(z) - 1 / p - psi(p) + psi(p + q)) + td)
    return ((1 - z) / p) * (s * (math.log1p(-z) - psi(q) + psi(p + q)) + te)


def test_beta_and_dirichlet_rsample_gradients():
    """_dirichlet_grad (the backward of Dirichlet and Beta rsample): float64
    equal to the incomplete beta function's differentiated series, within
    CPU's approximations' error of CPU; and the pathwise gradient of
    E[x] through Beta.rsample is the exact one (Monte Carlo)."""
    g = torch.Generator().manual_seed(0)
    for conc in ([0.5, 0.5], [2.0, 3.0], [10.0, 1.0], [0.1, 5.0], [1.0, 1.0, 1.0], [200.0, 0.3]):
        alpha = torch.tensor(conc, dtype=torch.float64).expand(40, len(conc)).contiguous()
        x = torch._sample_dirichlet(alpha, generator=g)
        total = alpha.sum(-1, True).expand_as(alpha)
        got = torch._dirichlet_grad(x.to("tpu"), alpha.to("tpu"), total.to("tpu")).cpu()
        want = torch.tensor([[_dirichlet_grad_series(*v) for v in zip(*row)] for row in
                             zip(x.tolist(), alpha.tolist(), total.tolist())], dtype=torch.float64)
        torch.testing.assert_close(got, want, rtol=1e-10, atol=0)
        torch.testing.assert_close(got, torch._dirichlet_grad(x, alpha, total), rtol=2e-3, atol=0)
    n = 100_000
    a = torch.full((n,), 2.0, device="tpu", requires_grad=True)
    b = torch.full((n,), 5.0, device="tpu", requires_grad=True)
    torch.manual_seed(0)
    torch.distributions.Beta(a, b).rsample().mean().backward()
    # E[x] = a / (a + b): d/da = b / (a + b)^2, d/db = -a / (a + b)^2
    assert abs(a.grad.sum().item() - 5 / 49) < 0.003 and abs(b.grad.sum().item() + 2 / 49) < 0.003
