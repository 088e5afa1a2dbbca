(function(){
const errors=document.getElementById('errors');
window.addEventListener('error',ev=>{errors.textContent+=String(ev.message)+'\n';});
const D=JSON.parse(document.getElementById('coa-data').textContent);
const E=D.episodes,T=D.teacher,PAGE=D.page_size,COLLAPSE=D.collapse;
const byTask={};T.forEach(t=>{(byTask[t.task]=byTask[t.task]||[]).push(t);});
const KEYS=['kind','family','verdict','status','reason','rmin','rmax','lmin','lmax','q','page'];
let S={};
function el(tag,cls,text){const n=document.createElement(tag);if(cls)n.className=cls;if(text!=null)n.textContent=String(text);return n;}
function readHash(){S={};const h=new URLSearchParams(location.hash.slice(1));KEYS.forEach(k=>{S[k]=h.get(k)||'';});
  KEYS.forEach(k=>{const i=document.getElementById('f-'+k);if(i)i.value=S[k];});}
function writeHash(){const h=new URLSearchParams();KEYS.forEach(k=>{if(S[k])h.set(k,S[k]);});
  history.replaceState(null,'','#'+h.toString());}
function options(id,key){const sel=document.getElementById(id);const seen=[...new Set(E.map(e=>e[key]).filter(v=>v!==''))].sort();
  seen.forEach(v=>{const o=el('option',null,v);o.value=v;sel.appendChild(o);});}
let hay=null;
function haystack(e,i){if(!hay)hay=new Array(E.length);if(hay[i]===undefined)
  hay[i]=(e.q+'\n'+e.id+'\n'+e.task+'\n'+e.reason+'\n'+e.steps.map(s=>s[2]).join('\n')).toLowerCase();return hay[i];}
function num(v){return v===''?null:Number(v);}
function reasons(e){return e.reason.toLowerCase().split(/[:;,]\s*/).map(x=>x.trim());}
function match(e,i){
  if(S.kind&&e.kind!==S.kind)return false;
  if(S.reason&&reasons(e).indexOf(S.reason.toLowerCase().trim())<0)return false;
  if(S.family&&e.family!==S.family)return false;
  if(S.verdict&&e.verdict!==S.verdict)return false;
  if(S.status&&e.status!==S.status)return false;
  const rmin=num(S.rmin),rmax=num(S.rmax),lmin=num(S.lmin),lmax=num(S.lmax);
  if((rmin!==null||rmax!==null)&&e.reward===null)return false;
  if(rmin!==null&&e.reward<rmin)return false;if(rmax!==null&&e.reward>rmax)return false;
  if((lmin!==null||lmax!==null)&&e.tokens===null)return false;
  if(lmin!==null&&e.tokens<lmin)return false;if(lmax!==null&&e.tokens>lmax)return false;
  if(S.q&&haystack(e,i).indexOf(S.q.toLowerCase())<0)return false;
  return true;}
function step(s,training){const [role,label,text,tokens,start,masked]=s;
  const d=el('div','step r-'+role);d.dataset.role=role;
  if(start!==null){d.dataset.start=start;d.dataset.end=start+text.length;}
  if(training){d.classList.add(masked?'masked':'trained');}
  const h=el('div','h');h.appendChild(el('b',null,role.replace('_',' ')));h.appendChild(document.createTextNode(' · '+label));
  if(tokens!==null)h.appendChild(document.createTextNode(' · '+tokens+' tokens'));
  if(training)h.appendChild(el('span','mk',masked?' · masked (not trained)':' · trained'));
  d.appendChild(h);
  const pre=el('pre','t',text);
  if(text.length>COLLAPSE&&(role==='observation'||role==='tool_call')){
    const det=el('details');det.appendChild(el('summary',null,text.length+' characters'));det.appendChild(pre);d.appendChild(det);}
  else d.appendChild(pre);
  return d;}
function card(e){const c=el('div','ep');c.dataset.id=e.id;c.dataset.kind=e.kind;c.dataset.task=e.task;
  if(e.side)c.dataset.side=e.side;
  c.dataset.spans=JSON.stringify(e.spans);
  const h=el('h2');h.appendChild(el('span','badge v-'+e.verdict,e.verdict));h.appendChild(el('span','badge',e.kind));
  h.appendChild(el('span','badge',e.family));h.appendChild(el('span','badge',e.status));
  if(e.reward!==null)h.appendChild(el('span','badge','reward '+(+e.reward).toFixed(3)));
  if(e.tokens!==null)h.appendChild(el('span','badge',e.tokens+' tokens'));
  h.appendChild(document.createTextNode(' '+e.id));c.appendChild(h);
  c.appendChild(el('div','q',e.q||('task '+e.task)));
  if(e.reason)c.appendChild(el('div','reason',e.reason));
  const f=el('div','facts');e.facts.forEach(([k,v])=>{f.appendChild(el('span',null,k+': '+v));});c.appendChild(f);
  const training=e.kind==='sft'||e.kind==='rollout';
  e.steps.forEach(s=>c.appendChild(step(s,training)));
  return c;}
function render(){writeHash();
  const shown=[];E.forEach((e,i)=>{if(match(e,i))shown.push(e);});
  const pages=Math.max(1,Math.ceil(shown.length/PAGE));let p=Math.min(Math.max(0,(parseInt(S.page)||1)-1),pages-1);
  const count=document.getElementById('count');count.textContent=shown.length;count.dataset.n=shown.length;
  document.getElementById('pageno').textContent=(p+1)+' / '+pages;
  const list=document.getElementById('episodes');list.textContent='';
  shown.slice(p*PAGE,(p+1)*PAGE).forEach(e=>{
    if(T.length){const pair=el('div','pair');pair.dataset.task=e.task;
      const l=el('div','student');l.appendChild(el('h3',null,'student'));l.appendChild(card(e));
      const r=el('div','teacher');r.appendChild(el('h3',null,'teacher'));
      (byTask[e.task]||[]).forEach(t=>r.appendChild(card(t)));
      if(!(byTask[e.task]||[]).length)r.appendChild(el('p',null,'no teacher episode on this task'));
      pair.appendChild(l);pair.appendChild(r);list.appendChild(pair);}
    else list.appendChild(card(e));});
  if(!document.body.dataset.ready)document.body.dataset.readyMs=String(Math.round(performance.now()));
  document.body.dataset.ready='1';}
options('f-kind','kind');options('f-family','family');options('f-verdict','verdict');options('f-status','status');
readHash();
KEYS.forEach(k=>{const i=document.getElementById('f-'+k);if(!i)return;
  i.addEventListener('input',()=>{S[k]=i.value;if(k!=='page')S.page='';render();});});
document.getElementById('prev').onclick=()=>{S.page=String(Math.max(1,(parseInt(S.page)||1)-1));render();};
document.getElementById('next').onclick=()=>{S.page=String((parseInt(S.page)||1)+1);render();};
window.addEventListener('hashchange',()=>{readHash();render();});
render();
})();
