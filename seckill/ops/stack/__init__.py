"""The local stack ``seckill up`` runs (:mod:`.up`): its supervisor (:mod:`.supervisor`) and
children (:mod:`.children`: gunicorn instances, nginx and the exporter of nginx's counts,
:mod:`.nginx_metrics`); the embedded Valkey (:mod:`.embedded`, its AOF repair :mod:`.aof`) or
Valkey Cluster (:mod:`.cluster`, :mod:`.replica_guard`), on ports of this run's slice
(:mod:`.ports`); nginx's config (:mod:`.nginx`); the scraper's token (:mod:`.scrape_token`)."""
