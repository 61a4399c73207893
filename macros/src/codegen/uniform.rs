//! Collectives under divergent control flow (docs/macro.md, "Collectives"). A block-wide collective (`sync_threads()`,
//! a barrier session of a `Cta` or `WarpSpan` coop, `block_reduce_sum`, `gemm_block`, …) needs every thread of the
//! block to reach it, and a warp-wide one (`sync_warp()`, shuffles, `ballot`, `mma`, a `Warp` or `Lanes` coop's
//! session, …) every thread of the warp: on the GPU, one that some threads skip is undefined behaviour or a hang.
//! This pass follows how far each value and the control flow at each point are the same across threads ([`Level`])
//! and refuses a collective whose control flow is not uniform enough, with an error on the collective that names
//! the condition (or early exit) that makes it divergent.
//!
//! - Values: launch-uniform values (a kernel's parameters, `block_idx_*`, grid and block sizes, literals, the
//!   device communicator's ranks and sizes, lengths) are the same on every thread of the block; `warp_id()` on every
//!   thread of a warp; thread and lane indices, data read from memory (indexing, loads, atomics, shuffles), what a
//!   device fn returns, and a device fn's own parameters (its callers decide them) may differ between threads.
//!   Arithmetic and the vocabulary's pure accessors join their operands; a local is as divergent as every value ever
//!   assigned to it, and as the control flow at each assignment (a fixed point over the function).
//! - Control flow: an `if`, `match` or `while` condition, a `for` range's bounds (`grid_stride(n)`: always
//!   per-thread) and the left operand of `&&`/`||` make what they guard as divergent as they are; a `return`,
//!   `break` or `continue` that only some threads take makes the rest of its block (for `break` and `return` inside a
//!   loop, the loop's every later iteration) that divergent.
//! - Sessions: a barrier or all-to-all session's end (`end()`, or its C++ destructor at the end of its scope)
//!   synchronizes its coop, so an early exit out of a session's scope that only some threads take is refused too.
//! - Device fns: a device fn's collectives are bits of its usage words (`BLOCK_COLLECTIVE_BIT`,
//!   `WARP_COLLECTIVE_BIT`, merged through its callees); a call under divergent control flow becomes a constant
//!   assertion in the caller's generated module, failing at the call when the callee has such a collective.
//!
//! The analysis is conservative: a collective it refuses may in fact be reached by every thread (the condition is
//! uniform in a way it cannot see); the way out is to compute the condition from launch-uniform values, or to move
//! the collective out of the condition.

use std::collections::HashMap;

use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::spanned::Spanned;
use syn::{Block, Expr, Pat, Stmt};

use super::ast::{FnKind, Signature};
use super::ctxt::Ctxt;
use super::lower::is_vocabulary_function;

/// How far a value, or the control flow at a point, is the same across threads (ordered: a join is the maximum).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Level {
    /// The same on every thread of the block.
    Block,
    /// The same on every thread of a warp.
    Warp,
    /// May differ from thread to thread.
    Thread,
}

/// The threads a collective needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scope {
    Block,
    Warp,
}

impl Scope {
    /// Whether control flow of `level` reaches every thread this collective needs.
    fn allows(self, level: Level) -> bool {
        match self {
            Scope::Block => level == Level::Block,
            Scope::Warp => level <= Level::Warp,
        }
    }

    fn noun(self) -> &'static str {
        match self {
            Scope::Block => "block",
            Scope::Warp => "warp",
        }
    }
}

/// A coop value: which threads its operations involve.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Coop {
    /// `Thread`, `Lanes::coalesced()`: only the calling thread(s); no requirement.
    Own,
    /// `Warp`, `Lanes::from_mask(m)`.
    Warp,
    /// `Cta`, `WarpSpan::from_warps(…)` (named barriers of whole warps), or a coop type parameter (any of them).
    Block,
}

impl Coop {
    fn scope(self) -> Option<Scope> {
        match self {
            Coop::Own => None,
            Coop::Warp => Some(Scope::Warp),
            Coop::Block => Some(Scope::Block),
        }
    }

    /// What every thread of the coop shares: the result of its bounded waits.
    fn level(self) -> Level {
        match self {
            Coop::Own => Level::Thread,
            Coop::Warp => Level::Warp,
            Coop::Block => Level::Block,
        }
    }
}

/// Why control flow is divergent: the condition, loop or early exit that made it so.
#[derive(Clone, Debug)]
struct Cause {
    /// "`if lane < 4` (line 12)".
    text: String,
}

/// The control flow at a point: how uniform, and the outermost construct that made it so.
#[derive(Clone, Debug)]
struct Ctl {
    level: Level,
    cause: Option<Cause>,
}

impl Ctl {
    fn uniform() -> Ctl {
        Ctl { level: Level::Block, cause: None }
    }

    /// Under a construct of `level` (its cause made only if it raises the level).
    fn under(&self, level: Level, cause: impl FnOnce() -> String) -> Ctl {
        if level > self.level {
            Ctl { level, cause: Some(Cause { text: cause() }) }
        } else {
            self.clone()
        }
    }
}

/// What the pass found, for the generated module and the usage words.
#[derive(Debug, Default)]
pub(crate) struct Report {
    /// The body has a block-wide collective.
    pub(crate) block_collective: bool,
    /// The body has a warp-wide collective (also what needs whole warps: shuffles, warp reductions, …).
    pub(crate) warp_collective: bool,
    /// Calls of device fns under control flow that is not block-uniform: checked against the callee's usage words.
    pub(crate) divergent_calls: Vec<DivergentCall>,
}

/// A call of a device fn under divergent control flow.
#[derive(Debug, Clone)]
pub(crate) struct DivergentCall {
    /// The callee's path, as the lowering's `calls` key it (`quote!(#path)` without generic arguments).
    pub(crate) key: String,
    pub(crate) level: Level,
    /// Why: "`if thread_idx_x() == 0` (line 5)".
    pub(crate) cause: String,
    pub(crate) span: Span,
}

/// Checks the body's collectives; reports errors into `cx`.
pub(crate) fn check(sig: &Signature, item: &syn::ItemFn, cx: &Ctxt) -> Report {
    let mut w = Walker::new(sig, item);
    // A fixed point over the locals' levels and the loops' exits (each pass only raises them; three levels).
    for _ in 0..64 {
        w.start(false);
        w.body(&item.block);
        if !w.changed {
            break;
        }
    }
    w.start(true);
    w.body(&item.block);
    w.finish(cx)
}

#[derive(Debug, Clone)]
struct Binding {
    name: String,
    id: usize,
    coop: Option<Coop>,
    /// A session this binding owns: its coop, whether it was ended where it was opened, and its scope's depth.
    session: Option<Session>,
}

#[derive(Debug, Clone, Copy)]
struct Session {
    coop: Coop,
    depth: usize,
    ended: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Return,
    Break(usize),
    Continue(usize),
}

#[derive(Debug, Clone)]
struct Exit {
    target: Target,
    level: Level,
    /// "the `return` at line 7, which only the threads under `if t == 0` (line 6) take".
    cause: String,
}

struct LoopFrame {
    id: usize,
    label: Option<String>,
    /// Scope depth outside the loop's body: the scopes a `break`/`continue` of it leaves are the deeper ones.
    depth: usize,
}

/// An error to report, unless it is an early exit out of a session whose collective is reported anyway.
struct Pending {
    tokens: TokenStream,
    message: String,
    /// A collective on this session (binding id).
    on_session: Option<usize>,
    /// An exit out of this session's scope (binding id).
    exits_session: Option<usize>,
}

struct Walker {
    /// Parameters: level and coop, by name.
    params: HashMap<String, (Level, Option<Coop>)>,
    // Persistent across passes, by creation order (every pass creates them in the same order).
    levels: Vec<Level>,
    loop_exits: Vec<(Level, Option<String>)>,
    changed: bool,
    // Per pass.
    next_binding: usize,
    next_loop: usize,
    bindings: Vec<Binding>,
    scopes: Vec<Vec<usize>>,
    loops: Vec<LoopFrame>,
    exits: Vec<Exit>,
    reporting: bool,
    pending: Vec<Pending>,
    report: Report,
    calls: HashMap<String, DivergentCall>,
}

impl Walker {
    fn new(sig: &Signature, item: &syn::ItemFn) -> Walker {
        let mut params = HashMap::new();
        for input in &item.sig.inputs {
            let syn::FnArg::Typed(pt) = input else { continue };
            let Pat::Ident(pi) = &*pt.pat else { continue };
            let name = pi.ident.to_string();
            // A kernel's parameters are the launch's: the same on every thread. A device fn's are its caller's,
            // which may differ between threads.
            let level = match sig.kind {
                FnKind::Kernel => Level::Block,
                FnKind::DeviceFn => Level::Thread,
            };
            params.insert(name, (level, coop_of_type(&pt.ty, sig)));
        }
        Walker {
            params,
            levels: Vec::new(),
            loop_exits: Vec::new(),
            changed: false,
            next_binding: 0,
            next_loop: 0,
            bindings: Vec::new(),
            scopes: Vec::new(),
            loops: Vec::new(),
            exits: Vec::new(),
            reporting: false,
            pending: Vec::new(),
            report: Report::default(),
            calls: HashMap::new(),
        }
    }

    fn start(&mut self, reporting: bool) {
        self.changed = false;
        self.next_binding = 0;
        self.next_loop = 0;
        self.bindings.clear();
        self.scopes.clear();
        self.loops.clear();
        self.exits.clear();
        self.reporting = reporting;
        self.pending.clear();
        self.report = Report::default();
        self.calls.clear();
    }

    fn finish(mut self, cx: &Ctxt) -> Report {
        let reported_sessions: Vec<usize> = self.pending.iter().filter_map(|p| p.on_session).collect();
        for p in &self.pending {
            if p.exits_session.is_some_and(|s| reported_sessions.contains(&s)) {
                continue;
            }
            cx.error_spanned_by(&p.tokens, &p.message);
        }
        let mut calls: Vec<DivergentCall> = self.calls.into_values().collect();
        calls.sort_by(|a, b| a.key.cmp(&b.key));
        self.report.divergent_calls = calls;
        self.report
    }

    fn body(&mut self, block: &Block) {
        self.scopes.push(Vec::new());
        self.block_stmts(block, &Ctl::uniform());
        self.scopes.pop();
    }

    // --- bindings -----------------------------------------------------------------------------------------------

    fn bind(&mut self, name: String, level: Level, coop: Option<Coop>, session: Option<Coop>) -> usize {
        let id = self.next_binding;
        self.next_binding += 1;
        if self.levels.len() <= id {
            self.levels.push(Level::Block);
        }
        self.raise(id, level);
        let depth = self.scopes.len();
        let session = session.map(|coop| Session { coop, depth, ended: false });
        let index = self.bindings.len();
        self.bindings.push(Binding { name, id, coop, session });
        if let Some(scope) = self.scopes.last_mut() {
            scope.push(index);
        }
        index
    }

    fn raise(&mut self, id: usize, level: Level) {
        if level > self.levels[id] {
            self.levels[id] = level;
            self.changed = true;
        }
    }

    fn lookup(&self, name: &str) -> Option<usize> {
        self.scopes.iter().rev().flat_map(|s| s.iter().rev()).copied().find(|&b| self.bindings[b].name == name)
    }

    /// Binds every name of a pattern at `level`; a plain name also takes the value's coop and session.
    fn bind_pattern(&mut self, pat: &Pat, level: Level, coop: Option<Coop>, session: Option<Coop>) {
        match pat {
            Pat::Ident(pi) => {
                self.bind(pi.ident.to_string(), level, coop, session);
                if let Some((_, sub)) = &pi.subpat {
                    self.bind_pattern(sub, level, None, None);
                }
            }
            Pat::Type(pt) => self.bind_pattern(&pt.pat, level, coop, session),
            Pat::Tuple(t) => t.elems.iter().for_each(|p| self.bind_pattern(p, level, None, None)),
            Pat::TupleStruct(t) => t.elems.iter().for_each(|p| self.bind_pattern(p, level, None, None)),
            Pat::Or(o) => o.cases.iter().for_each(|p| self.bind_pattern(p, level, None, None)),
            Pat::Paren(p) => self.bind_pattern(&p.pat, level, coop, session),
            Pat::Reference(r) => self.bind_pattern(&r.pat, level, None, None),
            Pat::Slice(s) => s.elems.iter().for_each(|p| self.bind_pattern(p, level, None, None)),
            Pat::Struct(s) => s.fields.iter().for_each(|f| self.bind_pattern(&f.pat, level, None, None)),
            _ => {}
        }
    }

    /// `place = value` (or `place op= value`) under `ctl`: a local becomes as divergent as the value and the control
    /// flow; memory writes say nothing about locals.
    fn assign(&mut self, place: &Expr, level: Level, ctl: &Ctl) {
        match strip(place) {
            Expr::Path(p) => {
                if let Some(b) = p.path.get_ident().and_then(|i| self.lookup(&i.to_string())) {
                    let id = self.bindings[b].id;
                    self.raise(id, level.max(ctl.level));
                }
            }
            Expr::Field(f) => self.assign(&f.base, level, ctl),
            _ => {}
        }
    }

    // --- statements and control flow -----------------------------------------------------------------------------

    /// The statements of a block in the current scope; the tail's level.
    fn block_stmts(&mut self, block: &Block, ctl: &Ctl) -> Level {
        let mut acc = ctl.clone();
        let mut value = Level::Block;
        let n = block.stmts.len();
        for (i, s) in block.stmts.iter().enumerate() {
            let mark = self.exits.len();
            let level = self.stmt(s, &acc);
            if i + 1 == n && matches!(s, Stmt::Expr(_, None)) {
                value = level;
            }
            // What follows an exit that only some threads take runs on the others only.
            for e in &self.exits[mark..] {
                acc = acc.under(e.level, || e.cause.clone());
            }
        }
        value
    }

    fn scoped_block(&mut self, block: &Block, ctl: &Ctl) -> Level {
        self.scopes.push(Vec::new());
        let level = self.block_stmts(block, ctl);
        self.scopes.pop();
        level
    }

    fn stmt(&mut self, s: &Stmt, ctl: &Ctl) -> Level {
        match s {
            Stmt::Local(l) => {
                let (level, coop, session) = match &l.init {
                    Some(init) => {
                        let level = self.expr(&init.expr, ctl);
                        if let Some((_, diverge)) = &init.diverge {
                            self.expr(diverge, ctl);
                        }
                        let session = self.session_of(&init.expr).or_else(|| session_of_type(&l.pat));
                        (level, self.coop_of(&init.expr), session)
                    }
                    None => (Level::Block, None, None),
                };
                self.bind_pattern(&l.pat, level.max(ctl.level), coop, session);
                Level::Block
            }
            Stmt::Expr(e, _) => self.expr(e, ctl),
            Stmt::Item(_) | Stmt::Macro(_) => Level::Block,
        }
    }

    fn expr(&mut self, e: &Expr, ctl: &Ctl) -> Level {
        match e {
            Expr::Lit(_) => Level::Block,
            Expr::Path(p) => self.path_level(p),
            Expr::Paren(p) => self.expr(&p.expr, ctl),
            Expr::Group(g) => self.expr(&g.expr, ctl),
            Expr::Unary(u) => self.expr(&u.expr, ctl),
            Expr::Cast(c) => self.expr(&c.expr, ctl),
            Expr::Field(f) => self.expr(&f.base, ctl),
            Expr::Binary(b) => {
                use syn::BinOp::*;
                let left = self.expr(&b.left, ctl);
                match b.op {
                    // The right operand runs only where the left one says so.
                    And(_) | Or(_) => {
                        let inner = ctl.under(left, || {
                            format!(
                                "it runs under the left operand of `{}`, {}, which differs between threads",
                                tokens(&b.op),
                                quoted(&b.left)
                            )
                        });
                        let right = self.expr(&b.right, &inner);
                        left.max(right)
                    }
                    AddAssign(_) | SubAssign(_) | MulAssign(_) | DivAssign(_) | RemAssign(_) | BitAndAssign(_)
                    | BitOrAssign(_) | BitXorAssign(_) | ShlAssign(_) | ShrAssign(_) => {
                        let right = self.expr(&b.right, ctl);
                        self.assign(&b.left, left.max(right), ctl);
                        Level::Block
                    }
                    _ => left.max(self.expr(&b.right, ctl)),
                }
            }
            Expr::Assign(a) => {
                let right = self.expr(&a.right, ctl);
                self.place(&a.left, ctl);
                self.assign(&a.left, right, ctl);
                Level::Block
            }
            Expr::Tuple(t) => t.elems.iter().fold(Level::Block, |acc, x| acc.max(self.expr(x, ctl))),
            Expr::Array(a) => a.elems.iter().fold(Level::Block, |acc, x| acc.max(self.expr(x, ctl))),
            Expr::Repeat(r) => self.expr(&r.expr, ctl).max(self.expr(&r.len, ctl)),
            Expr::Index(i) => {
                self.expr(&i.expr, ctl);
                self.expr(&i.index, ctl);
                // Data read from memory: another thread may have written it.
                Level::Thread
            }
            Expr::Range(r) => {
                let start = r.start.as_ref().map(|s| self.expr(s, ctl)).unwrap_or(Level::Block);
                let end = r.end.as_ref().map(|s| self.expr(s, ctl)).unwrap_or(Level::Block);
                start.max(end)
            }
            Expr::Reference(r) => {
                let level = self.expr(&r.expr, ctl);
                if r.mutability.is_some() {
                    // Lent mutably (an atomic, a device fn): anything may be written into it.
                    self.assign(&r.expr, Level::Thread, ctl);
                }
                level
            }
            Expr::Call(c) => self.call(c, ctl),
            Expr::MethodCall(m) => self.method_call(m, ctl),
            Expr::If(i) => self.if_expr(i, ctl),
            Expr::Match(m) => self.match_expr(m, ctl),
            Expr::Block(b) => self.scoped_block(&b.block, ctl),
            Expr::Unsafe(u) => self.scoped_block(&u.block, ctl),
            Expr::While(w) => {
                self.while_loop(w, ctl);
                Level::Block
            }
            Expr::Loop(l) => {
                self.plain_loop(l, ctl);
                Level::Block
            }
            Expr::ForLoop(f) => {
                self.for_loop(f, ctl);
                Level::Block
            }
            Expr::Return(r) => {
                if let Some(v) = &r.expr {
                    self.expr(v, ctl);
                }
                self.exit(Target::Return, "return", r, ctl);
                Level::Block
            }
            Expr::Break(b) => {
                if let Some(v) = &b.expr {
                    self.expr(v, ctl);
                }
                if let Some(id) = self.loop_target(b.label.as_ref()) {
                    self.exit(Target::Break(id), "break", b, ctl);
                }
                Level::Block
            }
            Expr::Continue(c) => {
                if let Some(id) = self.loop_target(c.label.as_ref()) {
                    self.exit(Target::Continue(id), "continue", c, ctl);
                }
                Level::Block
            }
            Expr::Let(l) => {
                let level = self.expr(&l.expr, ctl);
                self.bind_pattern(&l.pat, level.max(ctl.level), None, None);
                level
            }
            // Rejected by validation (closures, macros, `async`, …): nothing to follow.
            _ => Level::Thread,
        }
    }

    /// The sub-expressions of an assignment's place (`x[f(i)] = …`).
    fn place(&mut self, place: &Expr, ctl: &Ctl) {
        match strip(place) {
            Expr::Index(i) => {
                self.place(&i.expr, ctl);
                self.expr(&i.index, ctl);
            }
            Expr::Field(f) => self.place(&f.base, ctl),
            Expr::Unary(u) => self.place(&u.expr, ctl),
            Expr::MethodCall(_) | Expr::Call(_) => {
                self.expr(place, ctl);
            }
            _ => {}
        }
    }

    fn path_level(&self, p: &syn::ExprPath) -> Level {
        if let Some(ident) = p.path.get_ident() {
            let name = ident.to_string();
            if let Some(b) = self.lookup(&name) {
                return self.levels[self.bindings[b].id];
            }
            if let Some((level, _)) = self.params.get(&name) {
                return *level;
            }
        }
        // Constants (`WARP_SIZE`, `u32::MAX`), unit values (`Cta`), enum variants (`Order::Release`).
        Level::Block
    }

    fn if_expr(&mut self, i: &syn::ExprIf, ctl: &Ctl) -> Level {
        self.scopes.push(Vec::new());
        let cond = self.expr(&i.cond, ctl);
        let inner = ctl.under(cond, || {
            format!(
                "it runs under `if {}` (line {}), whose condition differs between threads",
                tokens(&*i.cond),
                line(&*i.cond)
            )
        });
        let then = self.scoped_block(&i.then_branch, &inner);
        self.scopes.pop();
        let otherwise = match &i.else_branch {
            Some((_, e)) => self.expr(e, &inner),
            None => Level::Block,
        };
        cond.max(then).max(otherwise)
    }

    fn match_expr(&mut self, m: &syn::ExprMatch, ctl: &Ctl) -> Level {
        let scrutinee = self.expr(&m.expr, ctl);
        let mut arms = ctl.under(scrutinee, || {
            format!(
                "it runs under `match {}` (line {}), whose value differs between threads",
                tokens(&*m.expr),
                line(&*m.expr)
            )
        });
        let mut value = scrutinee;
        for arm in &m.arms {
            self.scopes.push(Vec::new());
            self.bind_pattern(&arm.pat, scrutinee.max(ctl.level), None, None);
            if let Some((_, guard)) = &arm.guard {
                let g = self.expr(guard, &arms);
                // This arm, and every later one, runs where the guard decided.
                arms = arms.under(g, || {
                    format!(
                        "it runs under the guard `if {}` (line {}), which differs between threads",
                        tokens(&**guard),
                        line(&**guard)
                    )
                });
            }
            value = value.max(self.expr(&arm.body, &arms));
            self.scopes.pop();
        }
        value
    }

    /// A loop's id and the control flow its body starts with: as divergent as its earlier iterations' exits.
    fn enter_loop(&mut self, label: Option<&syn::Label>, ctl: &Ctl) -> (usize, Ctl) {
        let id = self.next_loop;
        self.next_loop += 1;
        if self.loop_exits.len() <= id {
            self.loop_exits.push((Level::Block, None));
        }
        let (level, cause) = self.loop_exits[id].clone();
        let head = ctl.under(level, || cause.unwrap_or_default());
        self.loops.push(LoopFrame { id, label: label.map(|l| l.name.ident.to_string()), depth: self.scopes.len() });
        (id, head)
    }

    /// After a loop's body: the exits that leave some threads out of its later iterations (`break`, `return`, and
    /// exits of outer loops; not its own `continue`) make its next pass divergent; its own exits end here.
    fn leave_loop(&mut self, id: usize, mark: usize) {
        self.loops.pop();
        let mut worst: Option<Exit> = None;
        for e in &self.exits[mark..] {
            if e.target != Target::Continue(id) && worst.as_ref().is_none_or(|w| e.level > w.level) {
                worst = Some(e.clone());
            }
        }
        if let Some(w) = worst {
            if w.level > self.loop_exits[id].0 {
                self.loop_exits[id] = (w.level, Some(format!("{} (in an earlier iteration of the loop)", w.cause)));
                self.changed = true;
            }
        }
        let kept: Vec<Exit> = self.exits[mark..]
            .iter()
            .filter(|e| e.target != Target::Break(id) && e.target != Target::Continue(id))
            .cloned()
            .collect();
        self.exits.truncate(mark);
        self.exits.extend(kept);
    }

    fn while_loop(&mut self, w: &syn::ExprWhile, ctl: &Ctl) {
        let (id, head) = self.enter_loop(w.label.as_ref(), ctl);
        let mark = self.exits.len();
        // The condition runs before every iteration, on the threads still in the loop.
        let cond = self.expr(&w.cond, &head);
        let body = head.under(cond, || {
            format!(
                "it runs in `while {}` (line {}), whose condition differs between threads",
                tokens(&*w.cond),
                line(&*w.cond)
            )
        });
        self.scoped_block(&w.body, &body);
        self.leave_loop(id, mark);
    }

    fn plain_loop(&mut self, l: &syn::ExprLoop, ctl: &Ctl) {
        let (id, head) = self.enter_loop(l.label.as_ref(), ctl);
        let mark = self.exits.len();
        self.scoped_block(&l.body, &head);
        self.leave_loop(id, mark);
    }

    fn for_loop(&mut self, f: &syn::ExprForLoop, ctl: &Ctl) {
        // The range is evaluated once, before the loop.
        let (range, what) = match for_range(&f.expr) {
            Some(ForRange::GridStride(n)) => {
                self.expr(n, ctl);
                (Level::Thread, "whose trip count differs between threads")
            }
            Some(ForRange::Bounds(bounds)) => {
                let level = bounds.into_iter().fold(Level::Block, |acc, b| acc.max(self.expr(b, ctl)));
                (level, "whose range differs between threads")
            }
            None => {
                self.expr(&f.expr, ctl);
                (Level::Thread, "whose iteration the macro does not follow")
            }
        };
        let (id, head) = self.enter_loop(f.label.as_ref(), ctl);
        let mark = self.exits.len();
        let body = head.under(range, || {
            format!(
                "it runs in the loop `for {} in {}` (line {}), {what}",
                tokens(&f.pat),
                tokens(&f.expr),
                line(&f.expr)
            )
        });
        self.scopes.push(Vec::new());
        self.bind_pattern(&f.pat, body.level, None, None);
        self.scoped_block(&f.body, &body);
        self.scopes.pop();
        self.leave_loop(id, mark);
    }

    fn loop_target(&self, label: Option<&syn::Lifetime>) -> Option<usize> {
        match label {
            None => self.loops.last().map(|f| f.id),
            Some(l) => {
                let name = l.ident.to_string();
                self.loops.iter().rev().find(|f| f.label.as_deref() == Some(name.as_str())).map(|f| f.id)
            }
        }
    }

    /// A `return`, `break` or `continue` under `ctl`: what follows it runs on fewer threads when `ctl` is divergent,
    /// and the sessions whose scope it leaves end on the threads that take it only.
    fn exit<T: quote::ToTokens + Spanned>(&mut self, target: Target, kind: &str, node: &T, ctl: &Ctl) {
        let cause = match &ctl.cause {
            Some(c) => {
                format!("it runs after the `{kind}` at line {}, which only some threads take ({})", line(node), c.text)
            }
            None => format!("it runs after the `{kind}` at line {}", line(node)),
        };
        self.exits.push(Exit { target, level: ctl.level, cause });
        if ctl.level == Level::Block || !self.reporting {
            return;
        }
        let depth = match target {
            Target::Return => 0,
            Target::Break(id) | Target::Continue(id) => {
                self.loops.iter().find(|f| f.id == id).map(|f| f.depth).unwrap_or(self.scopes.len())
            }
        };
        let left: Vec<usize> = self.scopes[depth.min(self.scopes.len())..].iter().flatten().copied().collect();
        for b in left {
            let binding = &self.bindings[b];
            let Some(session) = binding.session else { continue };
            let Some(scope) = session.coop.scope() else { continue };
            if session.ended || scope.allows(ctl.level) {
                continue;
            }
            let why = ctl.cause.as_ref().map(|c| c.text.clone()).unwrap_or_default();
            let message = format!(
                "this `{kind}` leaves the scope of the session `{name}`, but not every thread of the {noun} takes it: \
                 {why}. A session's end synchronizes its {noun}, so the threads that leave here would end it alone \
                 (undefined behaviour or a hang on the GPU): end it with `{name}.end()` first, or leave from where \
                 every thread of the {noun} does (docs/macro.md, \"Collectives\")",
                name = binding.name,
                noun = scope.noun(),
            );
            let id = binding.id;
            self.pending.push(Pending { tokens: quote!(#node), message, on_session: None, exits_session: Some(id) });
        }
    }

    // --- calls ----------------------------------------------------------------------------------------------------

    /// A collective of `scope` under `ctl`: an error unless the control flow reaches every thread it needs.
    fn collective<T: quote::ToTokens>(&mut self, scope: Scope, node: &T, ctl: &Ctl, session: Option<usize>) {
        match scope {
            Scope::Block => self.report.block_collective = true,
            Scope::Warp => self.report.warp_collective = true,
        }
        if !self.reporting || scope.allows(ctl.level) {
            return;
        }
        let noun = scope.noun();
        let why = ctl.cause.as_ref().map(|c| c.text.clone()).unwrap_or_default();
        let uniform = match scope {
            Scope::Block => {
                "launch-uniform values (parameters, `block_idx_x()`, grid and block sizes, loop counters over \
                             such ranges)"
            }
            Scope::Warp => "values every thread of a warp shares (launch-uniform values and `warp_id()`)",
        };
        let message = format!(
            "`{}` needs every thread of the {noun}, but not every thread of the {noun} gets here: {why}. On the GPU \
             a {noun}-wide collective that some threads skip is undefined behaviour or a hang: move it where every \
             thread of the {noun} runs, or decide the condition from {uniform}; thread and lane indices, data read \
             from memory, a device fn's parameters and results, and values derived from them differ between threads \
             (docs/macro.md, \"Collectives\")",
            short(node)
        );
        self.pending.push(Pending { tokens: quote!(#node), message, on_session: session, exits_session: None });
    }

    fn call(&mut self, c: &syn::ExprCall, ctl: &Ctl) -> Level {
        let args: Vec<Level> = c.args.iter().map(|a| self.expr(a, ctl)).collect();
        let joined = args.iter().copied().fold(Level::Block, Level::max);
        let Expr::Path(p) = strip(&c.func) else {
            self.expr(&c.func, ctl);
            return Level::Thread;
        };
        let segs: Vec<String> = p.path.segments.iter().map(|s| s.ident.to_string()).collect();
        let Some(last) = segs.last().map(|s| s.trim_start_matches("r#").to_string()) else { return Level::Thread };
        let prev = segs.len().checked_sub(2).map(|i| segs[i].as_str());
        if segs.len() == 1 && self.lookup(&last).is_some() {
            // A local called (a closure): rejected elsewhere.
            return Level::Thread;
        }
        // `Type::f(…)` and constructors: `Lanes::from_mask(m)`, `Pack::splat(v)`, `T::zero()`, `SignalInc(s)`.
        let associated = prev.is_some_and(|p| p.chars().next().is_some_and(|ch| ch.is_uppercase()) || is_scalar(p))
            || last.chars().next().is_some_and(|ch| ch.is_uppercase());
        if associated {
            if prev == Some("Lanes") && last == "coalesced" {
                // The lanes that happen to be active: which ones differs from call to call.
                return Level::Thread;
            }
            return joined;
        }
        if !is_vocabulary_function(&last) {
            // A device fn: its collectives are in its usage words, checked in the generated module.
            if ctl.level > Level::Block && self.reporting {
                let mut path = p.path.clone();
                for seg in path.segments.iter_mut() {
                    seg.arguments = syn::PathArguments::None;
                }
                let key = quote!(#path).to_string();
                let cause = ctl.cause.as_ref().map(|c| c.text.clone()).unwrap_or_default();
                let entry = self.calls.entry(key.clone()).or_insert(DivergentCall {
                    key,
                    level: ctl.level,
                    cause: cause.clone(),
                    span: c.func.span(),
                });
                if ctl.level > entry.level {
                    *entry = DivergentCall { key: entry.key.clone(), level: ctl.level, cause, span: c.func.span() };
                }
            }
            return Level::Thread;
        }
        // Coop arguments (`local_reduce_sum(Cta, …)`).
        let coop =
            c.args.iter().filter_map(|a| self.coop_of(a)).filter_map(Coop::scope).max_by_key(|s| *s == Scope::Block);
        if let Some(scope) = coop {
            self.collective(scope, c, ctl, None);
        }
        match last.as_str() {
            "thread_idx_x" | "thread_idx_y" | "thread_idx_z" | "index_1d" | "lane_id" | "global_timer_ns" => {
                Level::Thread
            }
            "warp_id" => Level::Warp,
            "block_idx_x" | "block_idx_y" | "block_idx_z" | "block_dim_x" | "block_dim_y" | "block_dim_z"
            | "grid_dim_x" | "grid_dim_y" | "grid_dim_z" | "grid_size_1d" | "pack_lanes" => Level::Block,
            "sync_threads" => {
                self.collective(Scope::Block, c, ctl, None);
                Level::Block
            }
            // A warp reduction per warp, then the block's: whole warps, and the whole block.
            "block_reduce_sum" | "block_reduce_max" | "block_reduce_min" => {
                self.collective(Scope::Block, c, ctl, None);
                self.report.warp_collective = true;
                Level::Block
            }
            "sync_warp" => {
                self.collective(Scope::Warp, c, ctl, None);
                Level::Block
            }
            "ballot" | "warp_reduce_sum" | "warp_reduce_max" | "warp_reduce_min" => {
                self.collective(Scope::Warp, c, ctl, None);
                Level::Warp
            }
            "shfl" | "shfl_xor" | "shfl_down" | "shfl_up" | "match_any" | "mma" => {
                self.collective(Scope::Warp, c, ctl, None);
                Level::Thread
            }
            "min" | "max" | "sqrt" | "rsqrt" | "exp" | "log" | "tanh" | "fma" | "abs" => joined,
            _ => Level::Thread,
        }
    }

    fn method_call(&mut self, m: &syn::ExprMethodCall, ctl: &Ctl) -> Level {
        let receiver = self.expr(&m.receiver, ctl);
        let args: Vec<Level> = m.args.iter().map(|a| self.expr(a, ctl)).collect();
        let joined = args.iter().copied().fold(receiver, Level::max);
        let name = m.method.to_string();
        let receiver_binding = match strip(&m.receiver) {
            Expr::Path(p) => p.path.get_ident().and_then(|i| self.lookup(&i.to_string())),
            _ => None,
        };
        let arg_coop =
            m.args.iter().filter_map(|a| self.coop_of(a)).max_by_key(|c| c.scope().map(|s| s == Scope::Block));
        let mut scope = arg_coop.and_then(Coop::scope);
        let mut session = None;
        match name.as_str() {
            // A coop's own sync.
            "sync" if m.args.is_empty() => scope = self.coop_of(&m.receiver).and_then(Coop::scope),
            // A session's end synchronizes its coop.
            "end" if m.args.is_empty() => {
                if let Some(b) = receiver_binding {
                    if let Some(s) = self.bindings[b].session {
                        scope = s.coop.scope();
                        session = Some(self.bindings[b].id);
                        if s.depth == self.scopes.len() {
                            if let Some(s) = self.bindings[b].session.as_mut() {
                                s.ended = true;
                            }
                        }
                    }
                }
            }
            // The block's 256 threads together; the persistent GEMM's walk (its producer warpgroup, then the
            // consumers' named barriers).
            "gemm_block" | "gemm_tiles" | "next_tile" => scope = Some(Scope::Block),
            // `ldmatrix.sync.aligned`: every lane of the warp names a row.
            "mma_ldmatrix_a" | "mma_ldmatrix_b" => scope = Some(Scope::Warp),
            _ => {}
        }
        if session.is_none() && scope.is_some() {
            session = receiver_binding.filter(|&b| self.bindings[b].session.is_some()).map(|b| self.bindings[b].id);
        }
        if let Some(scope) = scope {
            self.collective(scope, m, ctl, session);
        }
        match name.as_str() {
            // What every thread of the coop shares: the bounded waits combine their outcome over it.
            "wait_timeout" | "sync_timeout" | "wait_signal_timeout" | "wait_counter_timeout" => {
                arg_coop.map(Coop::level).unwrap_or(Level::Thread)
            }
            // The tile walk is the block's; so is the GEMM object itself (its per-thread values are `row(i)`,
            // `col(i)`, `value(i)`, which read as the default below).
            "next_tile" => Level::Block,
            "gemm_tiles" | "gemm_block" => joined,
            // Pure accessors and arithmetic of launch-uniform values.
            "len" | "is_empty" | "rank" | "nranks" | "lsa_rank" | "lsa_size" | "world" | "lsa" | "rail"
            | "team_rank_to_world" | "team_rank_to_lsa" | "contains" | "rank_from" | "inner_factor"
            | "outer_factor" | "offset" | "local" | "peer" | "lsa_multimem" | "gin" | "as_slice" | "as_mut_slice"
            | "splat" | "widen" | "narrow" | "lane" | "lane_sum" | "to_f32" | "count_ones" | "div_ceil" | "sqrt"
            | "rsqrt" | "exp" | "ln" | "tanh" | "abs" | "min" | "max" | "mul_add" | "is_ok" | "is_timed_out"
            | "is_aborted" | "rows" | "cols" | "shard_rows" | "mask" | "first_warp" | "warp_count" | "id" | "size"
            | "buffer" | "slots" | "clone" | "row0" | "col0" | "tiles" | "tile_row0" | "tile_col0" => joined,
            _ => Level::Thread,
        }
    }

    // --- coops and sessions ---------------------------------------------------------------------------------------

    /// The coop an expression names, if it is one.
    fn coop_of(&self, e: &Expr) -> Option<Coop> {
        match strip(e) {
            Expr::Reference(r) => self.coop_of(&r.expr),
            Expr::Path(p) => {
                if let Some(ident) = p.path.get_ident() {
                    let name = ident.to_string();
                    if let Some(b) = self.lookup(&name) {
                        return self.bindings[b].coop;
                    }
                    if let Some((_, coop)) = self.params.get(&name) {
                        return *coop;
                    }
                }
                match p.path.segments.last()?.ident.to_string().as_str() {
                    "Cta" => Some(Coop::Block),
                    "Warp" => Some(Coop::Warp),
                    "Thread" => Some(Coop::Own),
                    _ => None,
                }
            }
            Expr::Call(c) => {
                let Expr::Path(p) = strip(&c.func) else { return None };
                let segs: Vec<String> = p.path.segments.iter().map(|s| s.ident.to_string()).collect();
                match segs.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
                    [.., "Lanes", "from_mask"] => Some(Coop::Warp),
                    [.., "Lanes", "coalesced"] => Some(Coop::Own),
                    [.., "WarpSpan", "from_warps"] => Some(Coop::Block),
                    _ => None,
                }
            }
            _ => None,
        }
    }

    /// The coop of the session an expression opens (`dev.lsa_barrier(Cta, i)`), if it opens one.
    fn session_of(&self, e: &Expr) -> Option<Coop> {
        let Expr::MethodCall(m) = strip(e) else { return None };
        match m.method.to_string().as_str() {
            "lsa_barrier" | "lsa_multimem_barrier" | "rail_barrier" | "world_barrier" | "hybrid_barrier" | "ll_a2a" => {
                // An unknown coop (a device fn's result) is taken as the block's.
                Some(m.args.first().and_then(|a| self.coop_of(a)).unwrap_or(Coop::Block))
            }
            _ => None,
        }
    }
}

/// A device fn parameter's coop, from its type: `Cta`, `Warp`, …, or a coop type parameter (any coop: the block's).
fn coop_of_type(ty: &syn::Type, sig: &Signature) -> Option<Coop> {
    let ty = match ty {
        syn::Type::Reference(r) => &*r.elem,
        t => t,
    };
    let name = super::types::last_ident(ty)?;
    match name.as_str() {
        "Cta" | "WarpSpan" => Some(Coop::Block),
        "Warp" | "Lanes" => Some(Coop::Warp),
        "Thread" => Some(Coop::Own),
        n if sig.generic_names.coops.iter().any(|c| c == n) => Some(Coop::Block),
        _ => None,
    }
}

/// `let bar: LsaBarrier<'_, Cta> = open(dev);`: a session a device fn opened, by its annotation.
fn session_of_type(pat: &Pat) -> Option<Coop> {
    let Pat::Type(pt) = pat else { return None };
    let syn::Type::Path(tp) = &*pt.ty else { return None };
    let last = tp.path.segments.last()?;
    if !matches!(last.ident.to_string().as_str(), "LsaBarrier" | "GinBarrier" | "HybridBarrier" | "LlA2a") {
        return None;
    }
    let coop = match &last.arguments {
        syn::PathArguments::AngleBracketed(a) => a.args.iter().rev().find_map(|arg| match arg {
            syn::GenericArgument::Type(t) => super::types::last_ident(t),
            _ => None,
        }),
        _ => None,
    };
    Some(match coop.as_deref() {
        Some("Warp" | "Lanes") => Coop::Warp,
        Some("Thread") => Coop::Own,
        _ => Coop::Block,
    })
}

enum ForRange<'e> {
    GridStride(&'e Expr),
    Bounds(Vec<&'e Expr>),
}

fn for_range(e: &Expr) -> Option<ForRange<'_>> {
    match strip(e) {
        Expr::Range(r) => Some(ForRange::Bounds(r.start.iter().chain(r.end.iter()).map(|b| &**b).collect())),
        Expr::MethodCall(m) if m.method == "step_by" || m.method == "rev" => match for_range(&m.receiver)? {
            ForRange::Bounds(mut b) => {
                b.extend(m.args.iter());
                Some(ForRange::Bounds(b))
            }
            g => Some(g),
        },
        Expr::Call(c) => match strip(&c.func) {
            Expr::Path(p) if p.path.segments.last().is_some_and(|s| s.ident == "grid_stride") => {
                c.args.first().map(ForRange::GridStride)
            }
            _ => None,
        },
        _ => None,
    }
}

fn strip(e: &Expr) -> &Expr {
    match e {
        Expr::Paren(p) => strip(&p.expr),
        Expr::Group(g) => strip(&g.expr),
        other => other,
    }
}

fn is_scalar(name: &str) -> bool {
    matches!(
        name,
        "f32"
            | "f64"
            | "f16"
            | "bf16"
            | "i8"
            | "i16"
            | "i32"
            | "i64"
            | "u8"
            | "u16"
            | "u32"
            | "u64"
            | "usize"
            | "isize"
    )
}

fn tokens<T: quote::ToTokens>(node: &T) -> String {
    let text = quote!(#node).to_string();
    if text.len() > 60 {
        format!(
            "{}…",
            &text[..text.char_indices().take_while(|(i, _)| *i < 57).last().map_or(0, |(i, c)| i + c.len_utf8())]
        )
    } else {
        text
    }
}

fn line<T: Spanned>(node: &T) -> usize {
    node.span().start().line
}

/// "`lane < 4` (line 12)".
fn quoted(e: &Expr) -> String {
    format!("`{}` (line {})", tokens(e), line(e))
}

/// The collective as written, shortened: `bar.sync(…)`.
fn short<T: quote::ToTokens>(node: &T) -> String {
    tokens(node)
}
